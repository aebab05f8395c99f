package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
)

// netLab is a private network of network namespaces: one namespace
// holds a bridge, each host gets a namespace of its own joined to the
// bridge by a veth pair, and the namespace the harness runs in joins it
// too (the simulator and the harness's own NATS connection live there).
// Everything is named after the harness's process id, so that two
// harnesses do not meet and a later one can clear what a killed one left
// behind (see clearStaleLabs).
type netLab struct {
	id     string // "<pid>": in every name the lab creates
	prefix string // 10.213.N.: the lab's /24
	net    string // namespace of the bridge
	root   string // the harness's end of its veth pair
	logf   func(format string, args ...any)

	mu     sync.Mutex
	spaces []string // namespaces created, for close
	hosts  map[string]*labHost
}

// labHost is one host of a netLab.
type labHost struct {
	name string
	ns   string // its namespace
	ip   string
	link string // its veth's end on the bridge, in the bridge's namespace
}

// labNSPrefix starts the name of every namespace a lab creates.
const labNSPrefix = "aerie-chaos-"

// ip runs the ip command, returning its output in the error.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetLab creates the bridge namespace and joins the harness's
// namespace to it. It fails when the machine does not allow network
// namespaces (not root, no ip command, a container without
// CAP_SYS_ADMIN); nothing is left behind then.
func newNetLab(logf func(string, ...any)) (*netLab, error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("no ip command: %w", err)
	}
	clearStaleLabs(logf)
	pid := os.Getpid()
	l := &netLab{
		id:     strconv.Itoa(pid),
		prefix: fmt.Sprintf("10.213.%d.", 1+pid%250),
		logf:   logf,
		hosts:  map[string]*labHost{},
	}
	l.net = labNSPrefix + l.id + "-net"
	l.root = "ac" + l.id + "r"
	steps := [][]string{
		{"netns", "add", l.net},
		{"-n", l.net, "link", "set", "lo", "up"},
		{"-n", l.net, "link", "add", "br0", "type", "bridge"},
		{"-n", l.net, "link", "set", "br0", "up"},
		{"link", "add", l.root, "type", "veth", "peer", "name", "r0", "netns", l.net},
		{"-n", l.net, "link", "set", "r0", "master", "br0", "up"},
		{"addr", "add", l.prefix + "1/24", "dev", l.root},
		{"link", "set", l.root, "up"},
	}
	for i, s := range steps {
		if err := ip(s...); err != nil {
			if i > 0 {
				l.close()
			}
			return nil, err
		}
		if i == 0 {
			l.spaces = append(l.spaces, l.net)
		}
	}
	return l, nil
}

// rootIP is the harness's address on the lab's network.
func (l *netLab) rootIP() string { return l.prefix + "1" }

// addHost creates a namespace for host name with address prefix+n,
// joined to the bridge.
func (l *netLab) addHost(name string, n int) (*labHost, error) {
	h := &labHost{name: name, ns: labNSPrefix + l.id + "-" + name, ip: l.prefix + strconv.Itoa(n), link: "v-" + name}
	if err := ip("netns", "add", h.ns); err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.spaces = append(l.spaces, h.ns)
	l.hosts[name] = h
	l.mu.Unlock()
	for _, s := range [][]string{
		{"-n", h.ns, "link", "set", "lo", "up"},
		{"-n", l.net, "link", "add", h.link, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"-n", l.net, "link", "set", h.link, "master", "br0", "up"},
		{"-n", h.ns, "addr", "add", h.ip + "/24", "dev", "eth0"},
		{"-n", h.ns, "link", "set", "eth0", "up"},
	} {
		if err := ip(s...); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// cut takes host name off the network: its veth's end on the bridge goes
// down, so nothing goes in or out, and open connections see silence, not
// a reset, as when a cable is pulled.
func (l *netLab) cut(name string) error {
	return ip("-n", l.net, "link", "set", l.hosts[name].link, "down")
}

// reconnect puts host name back on the network.
func (l *netLab) reconnect(name string) error {
	return ip("-n", l.net, "link", "set", l.hosts[name].link, "up")
}

// close deletes every namespace the lab created, by name, and with them
// their interfaces; the harness's end of its veth pair goes with its
// peer. The processes in them must have ended first.
func (l *netLab) close() error {
	l.mu.Lock()
	spaces := l.spaces
	l.spaces = nil
	l.mu.Unlock()
	var errs []error
	for i := len(spaces) - 1; i >= 0; i-- {
		if err := ip("netns", "del", spaces[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := exec.Command("ip", "link", "show", l.root).Run(); err == nil {
		if err := ip("link", "del", l.root); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// clearStaleLabs deletes the namespaces of labs whose harness process
// is gone (a test binary killed by its timeout runs no cleanup).
func clearStaleLabs(logf func(string, ...any)) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, labNSPrefix)
		if !ok {
			continue
		}
		id, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(id)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + id); err == nil {
			continue // its harness still runs
		}
		if err := ip("netns", "del", name); err == nil {
			logf("deleted namespace %s, left by an earlier run", name)
		}
		_ = exec.Command("ip", "link", "del", "ac"+id+"r").Run()
	}
}
