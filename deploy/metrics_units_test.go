package deploy

import (
	"bufio"
	"net"
	"os"
	"strings"
	"testing"
)

// directives reads a unit file's KEY=value lines, in order, comments
// and section headers left out.
func directives(t *testing.T, name string) [][2]string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "[") {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Errorf("%s: %q is not KEY=value", name, l)
			continue
		}
		out = append(out, [2]string{k, v})
	}
	return out
}

// Every aerie unit serves metrics by default, on a port of its own kind
// (a host may run a worker and the aggregator), passes the address to
// the flag where `systemctl status` shows it, and reads an optional file
// of its instance after aerie.env so that one instance can move to
// another port; aerie.env itself sets no address, which would give every
// unit the same one.
func TestUnitsMetrics(t *testing.T) {
	ports := map[string]string{}
	for _, name := range []string{"aerie-work@.service", "aerie-aggregate@.service"} {
		var listen, execStart string
		var envFiles []string
		for _, d := range directives(t, name) {
			switch d[0] {
			case "Environment":
				if v, ok := strings.CutPrefix(d[1], "AERIE_METRICS_LISTEN="); ok {
					listen = v
				}
			case "EnvironmentFile":
				envFiles = append(envFiles, d[1])
			case "ExecStart":
				execStart = d[1]
			}
		}
		host, port, err := net.SplitHostPort(listen)
		if err != nil || port == "" || port == "0" {
			t.Errorf("%s: Environment=AERIE_METRICS_LISTEN=%q: want a host:port default (%v)", name, listen, err)
		}
		if host != "0.0.0.0" && host != "" {
			t.Errorf("%s: metrics on %q: Prometheus scrapes from another host, listen on every address", name, host)
		}
		if other, ok := ports[port]; ok {
			t.Errorf("%s and %s both default to metrics port %s: a host running both would fail to start one", name, other, port)
		}
		ports[port] = name
		if !strings.Contains(" "+execStart+" ", " --metrics-listen=${AERIE_METRICS_LISTEN} ") {
			t.Errorf("%s: ExecStart=%s: want --metrics-listen=${AERIE_METRICS_LISTEN}", name, execStart)
		}
		if len(envFiles) != 2 || envFiles[0] != "/etc/aerie/aerie.env" || envFiles[1] != "-/etc/aerie/%N.env" {
			t.Errorf("%s: EnvironmentFile= %q, want /etc/aerie/aerie.env then the instance's optional -/etc/aerie/%%N.env", name, envFiles)
		}
	}
	for _, d := range directives(t, "aerie.env.example") {
		if d[0] == "AERIE_METRICS_LISTEN" {
			t.Errorf("aerie.env.example sets AERIE_METRICS_LISTEN=%s: it would override every unit's own port", d[1])
		}
	}
}
