// Package deploy holds no code: its directory has the systemd units and
// the nats-server configuration of a production install (README.md
// there), and its tests check those units with systemd-analyze.
package deploy
