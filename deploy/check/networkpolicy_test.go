package check

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"testing"
)

// natsPodLabels are the NATS chart's selector labels of its server pods
// for release nats (nats.selectorLabels in chart 2.14.2).
var natsPodLabels = map[string]any{
	"app.kubernetes.io/name":      "nats",
	"app.kubernetes.io/instance":  "nats",
	"app.kubernetes.io/component": "nats",
}

// pod is an endpoint of a connection as NetworkPolicies see it: a pod
// with its labels in a namespace, or an address outside the cluster
// (external).
type pod struct {
	name      string
	namespace string
	labels    map[string]any
	external  bool
}

// TestNetworkPolicies evaluates the rendered NetworkPolicies as the API
// defines them (a pod selected by no policy of a direction is open in
// that direction; the rules of the policies that select it add up) for
// the connections aerie needs and some it must not get: the NATS pods
// take routes from each other only, clients from the aerie namespace and
// monitoring from KEDA's; aerie's pods take only Prometheus's scrapes of
// their metrics port (the live page is for kubectl port-forward, which
// no policy sees) and reach DNS, NATS and (the workers) the vLLM
// backend's port only.
func TestNetworkPolicies(t *testing.T) {
	for _, dir := range kustomizations {
		objs := render(t, dir)
		var policies []object
		for _, o := range objs {
			if o.kind == "NetworkPolicy" {
				policies = append(policies, o)
			}
		}
		cfg := find(t, objs, "ConfigMap", "aerie-config")
		natsPort := urlPort(t, str(cfg.m, "data", "AERIE_NATS_URL"))
		so := find(t, objs, "ScaledObject", "aerie-worker")
		monitorPort := urlPort(t, "http://"+str(so.m, "spec", "triggers", 0, "metadata", "natsServerMonitoringEndpoint"))
		routePort := urlPort(t, "nats://"+natsRoutes[0])
		// The workers' backend: aerie-config's, unless the worker
		// container sets its own (the vllm-sidecar component).
		backendURL := str(cfg.m, "data", "AERIE_BACKEND")
		for _, c := range list(find(t, objs, "Deployment", "aerie-worker").m, "spec", "template", "spec", "containers") {
			for _, e := range list(c, "env") {
				if str(e, "name") == "AERIE_BACKEND" && str(e, "value") != "" {
					backendURL = str(e, "value")
				}
			}
		}
		backend, err := url.Parse(backendURL)
		if err != nil {
			t.Fatalf("%s: AERIE_BACKEND: %v", dir, err)
		}

		podOf := func(kind, name string) pod {
			o := find(t, objs, kind, name)
			labels, _ := get(o.m, "spec", "template", "metadata", "labels").(map[string]any)
			return pod{name: name, namespace: o.namespace, labels: labels}
		}
		worker, aggregator := podOf("Deployment", "aerie-worker"), podOf("StatefulSet", "aerie-aggregator")
		nats := pod{name: "nats-0", namespace: "nats", labels: natsPodLabels}
		natsBox := pod{name: "nats-box", namespace: "nats", labels: map[string]any{"app.kubernetes.io/name": "nats", "app.kubernetes.io/component": "nats-box"}}
		keda := pod{name: "keda-operator", namespace: "keda", labels: map[string]any{"app": "keda-operator"}}
		other := pod{name: "elsewhere", namespace: "default", labels: map[string]any{"app": "x"}}
		vllm := pod{name: "vllm", namespace: "aerie", labels: map[string]any{"app": "vllm"}}
		dns := pod{name: "coredns", namespace: "kube-system", labels: map[string]any{"k8s-app": "kube-dns"}}
		outside := pod{name: "an address outside the cluster", external: true}
		prometheus := pod{name: "prometheus", namespace: "monitoring", labels: map[string]any{"app.kubernetes.io/name": "prometheus"}}
		servers := aerieServers(t, dir, objs)
		metricsPort, pagePort := servers["metrics"][0].port, servers["http"][0].port

		type conn struct {
			from, to pod
			proto    string
			port     int
			want     bool
		}
		conns := []conn{
			{nats, nats, "TCP", routePort, true},
			{worker, nats, "TCP", routePort, false},
			{keda, nats, "TCP", routePort, false},
			{other, nats, "TCP", routePort, false},
			{vllm, nats, "TCP", routePort, false},
			{worker, nats, "TCP", natsPort, true},
			{aggregator, nats, "TCP", natsPort, true},
			{vllm, nats, "TCP", natsPort, true}, // the namespace is admitted, not only aerie's pods
			{keda, nats, "TCP", natsPort, false},
			{other, nats, "TCP", natsPort, false},
			{keda, nats, "TCP", monitorPort, true},
			{worker, nats, "TCP", monitorPort, false},
			{other, nats, "TCP", monitorPort, false},
			{nats, nats, "TCP", 7777, false},
			{worker, natsBox, "TCP", natsPort, false},
			{other, natsBox, "TCP", natsPort, false},
			{other, worker, "TCP", 8000, false},
			{other, aggregator, "TCP", 8000, false},
			{worker, aggregator, "TCP", 8000, false},
			{worker, dns, "UDP", 53, true},
			{worker, dns, "TCP", 53, true},
			{aggregator, dns, "UDP", 53, true},
			{aggregator, outside, "TCP", 443, false},
			{aggregator, outside, "TCP", 8000, false},
			{worker, outside, "TCP", 443, false},
			{worker, nats, "TCP", 6222, false},
			{worker, other, "TCP", 22, false},
			{aggregator, vllm, "TCP", 8000, false},
			{prometheus, worker, "TCP", metricsPort, true},
			{prometheus, aggregator, "TCP", metricsPort, true},
			{prometheus, aggregator, "TCP", pagePort, false},
			{prometheus, worker, "TCP", 8000, false},
			{prometheus, nats, "TCP", natsPort, false},
			{other, worker, "TCP", metricsPort, false},
			{other, aggregator, "TCP", metricsPort, false},
			{vllm, worker, "TCP", metricsPort, false},
			{other, aggregator, "TCP", pagePort, false},
			{worker, aggregator, "TCP", pagePort, false},
		}
		// The backend the workers call, when it is not the pod's own
		// loopback: a Service in the cluster or an address outside it.
		if backend.Hostname() != "127.0.0.1" && backend.Hostname() != "localhost" {
			port := urlPort(t, backend.String())
			conns = append(conns, conn{worker, vllm, "TCP", port, true}, conn{worker, outside, "TCP", port, true})
		}
		for _, c := range conns {
			got := allowed(policies, "Egress", c.from, c.to, c.proto, c.port) && allowed(policies, "Ingress", c.to, c.from, c.proto, c.port)
			if got != c.want {
				verb := "refused"
				if got {
					verb = "allowed"
				}
				t.Errorf("%s: %s/%s -> %s/%s %s/%d is %s", dir, c.from.namespace, c.from.name, c.to.namespace, c.to.name, c.proto, c.port, verb)
			}
		}
	}
}

func urlPort(t *testing.T, s string) int {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("%s: no port", s)
	}
	return p
}

// allowed reports whether the policies let p take (Ingress) or open
// (Egress) a connection with peer on proto/port.
func allowed(policies []object, direction string, p, peer pod, proto string, port int) bool {
	if p.external {
		return true // not a pod: no policy applies to it
	}
	selected := false
	for _, o := range policies {
		if o.namespace != p.namespace || !matches(get(o.m, "spec", "podSelector"), p.labels) {
			continue
		}
		types := list(o.m, "spec", "policyTypes")
		if len(types) == 0 { // the API's default
			types = []any{"Ingress"}
			if get(o.m, "spec", "egress") != nil {
				types = append(types, "Egress")
			}
		}
		if !slices.Contains(types, any(direction)) {
			continue
		}
		selected = true
		rulesKey, peersKey := "ingress", "from"
		if direction == "Egress" {
			rulesKey, peersKey = "egress", "to"
		}
		for _, r := range list(o.m, "spec", rulesKey) {
			if portMatches(list(r, "ports"), proto, port) && peerMatches(list(r, peersKey), o.namespace, peer) {
				return true
			}
		}
	}
	return !selected
}

func portMatches(ports []any, proto string, port int) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		want := str(p, "protocol")
		if want == "" {
			want = "TCP"
		}
		if want != proto {
			continue
		}
		if get(p, "port") == nil || fmt.Sprint(get(p, "port")) == strconv.Itoa(port) {
			return true
		}
	}
	return false
}

// peerMatches reports whether peer is among peers of a rule in a policy
// of namespace ns. An ipBlock is taken to match addresses outside the
// cluster only.
func peerMatches(peers []any, ns string, peer pod) bool {
	if len(peers) == 0 {
		return true
	}
	for _, e := range peers {
		if get(e, "ipBlock") != nil {
			if peer.external {
				return true
			}
			continue
		}
		if peer.external {
			continue
		}
		nsSel, podSel := get(e, "namespaceSelector"), get(e, "podSelector")
		nsOK := peer.namespace == ns
		if nsSel != nil {
			nsOK = matches(nsSel, map[string]any{"kubernetes.io/metadata.name": peer.namespace})
		}
		if nsOK && (podSel == nil || matches(podSel, peer.labels)) {
			return true
		}
	}
	return false
}

// matches evaluates a label selector (matchLabels and matchExpressions)
// against labels; an empty selector matches every pod.
func matches(selector any, labels map[string]any) bool {
	ml, _ := get(selector, "matchLabels").(map[string]any)
	for k, v := range ml {
		if labels[k] != v {
			return false
		}
	}
	for _, e := range list(selector, "matchExpressions") {
		v, has := labels[str(e, "key")]
		values := list(e, "values")
		switch str(e, "operator") {
		case "In":
			if !has || !slices.Contains(values, v) {
				return false
			}
		case "NotIn":
			if has && slices.Contains(values, v) {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		default:
			return false
		}
	}
	return true
}
