// Package systemd holds the rehearsal of deploy/README.md, the systemd
// way: six hosts booted with systemd (systemd-nspawn on overlays of this
// machine's root, each in its own network namespace), the README's
// command blocks run on the hosts they name, and a run through the
// units. It needs root and systemd-container, takes about a minute, and
// runs with AERIE_SYSTEMD=1 (make systemd); otherwise it skips.
package systemd
