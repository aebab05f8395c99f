package check

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"reflect"
	"strconv"
	"testing"

	"sigs.k8s.io/yaml"
)

// monitoringComponent adds the prometheus-operator objects (PodMonitor,
// PrometheusRule); the base leaves them out so that it applies without
// the operator's CRDs.
const monitoringComponent = "components/prometheus-operator"

// observationOnly reports whether c is an aerie container whose ports
// are only its metrics and live page.
func observationOnly(c any) bool {
	if _, ok := roleOf[str(c, "args", 0)]; !ok {
		return false
	}
	for _, p := range list(c, "ports") {
		if n := str(p, "name"); n != "metrics" && n != "http" {
			return false
		}
	}
	return true
}

// served is an aerie container's listening flag: the port it gives and
// the pod it runs in.
type served struct {
	where  string
	port   int
	labels map[string]any // the pod template's
	ns     string
}

// listenPort checks that --flag is 0.0.0.0:port (reachable from outside
// the pod) and that a container port of name carries that port.
func listenPort(t *testing.T, where string, c any, flag, name string) int {
	t.Helper()
	args := make([]string, 0, len(list(c, "args")))
	for _, a := range list(c, "args") {
		args = append(args, fmt.Sprint(a))
	}
	addr := flagValue(args, flag)
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || port == 0 {
		t.Errorf("%s: %s=%q: want 0.0.0.0:<port>", where, flag, addr)
		return 0
	}
	if host != "0.0.0.0" {
		t.Errorf("%s: %s=%s: only 0.0.0.0 is reachable from outside the pod", where, flag, addr)
	}
	found := false
	for _, cp := range list(c, "ports") {
		if str(cp, "name") == name {
			found = true
			if n, _ := get(cp, "containerPort").(int); n != port {
				t.Errorf("%s: container port %s is %v, but %s listens on %d", where, name, get(cp, "containerPort"), flag, port)
			}
		}
	}
	if !found {
		t.Errorf("%s: no container port named %s for %s=%s", where, name, flag, addr)
	}
	return port
}

// aerieServers returns, by container port name (metrics, http), every
// aerie worker's and aggregator's listening port in objs.
func aerieServers(t *testing.T, dir string, objs []object) map[string][]served {
	t.Helper()
	out := map[string][]served{}
	for _, o := range objs {
		if o.kind != "Deployment" && o.kind != "StatefulSet" {
			continue
		}
		labels, _ := get(o.m, "spec", "template", "metadata", "labels").(map[string]any)
		annotations, _ := get(o.m, "spec", "template", "metadata", "annotations").(map[string]any)
		for _, c := range list(o.m, "spec", "template", "spec", "containers") {
			cmd := str(c, "args", 0)
			if cmd != "work" && cmd != "aggregate" {
				continue
			}
			where := dir + ": " + o.kind + "/" + o.name + " container " + str(c, "name")
			port := listenPort(t, where, c, "--metrics-listen", "metrics")
			out["metrics"] = append(out["metrics"], served{where, port, labels, o.namespace})
			if annotations["prometheus.io/scrape"] != "true" || annotations["prometheus.io/port"] != strconv.Itoa(port) || annotations["prometheus.io/path"] != "/metrics" {
				t.Errorf("%s: pod annotations %v, want prometheus.io/scrape \"true\", port %d and path /metrics", where, annotations, port)
			}
			if cmd == "aggregate" {
				port := listenPort(t, where, c, "--http-listen", "http")
				out["http"] = append(out["http"], served{where, port, labels, o.namespace})
			}
		}
	}
	if len(out["metrics"]) < 2 || len(out["http"]) != 1 {
		t.Fatalf("%s: metrics served by %d aerie containers, the live page by %d: want every worker and the aggregator, and the aggregator", dir, len(out["metrics"]), len(out["http"]))
	}
	return out
}

// TestKubernetesMetrics checks that production is scrapeable: every
// worker and aggregator container passes --metrics-listen on a container
// port named metrics, announced by prometheus.io annotations and named by
// a Service of its pods; the aggregator's live page is on a port named
// http, with a Service in the cluster only (it has no login: reached
// with kubectl port-forward), and no Service of the build is reachable
// from outside the cluster.
func TestKubernetesMetrics(t *testing.T) {
	for _, dir := range kustomizations {
		objs := render(t, dir)
		for name, servers := range aerieServers(t, dir, objs) {
			for _, s := range servers {
				if !servicePort(objs, s, name) {
					t.Errorf("%s: no Service of namespace %s selects this pod with a port named %s to %d", s.where, s.ns, name, s.port)
				}
			}
		}
		for _, o := range objs {
			if o.kind == "Ingress" {
				t.Errorf("%s: Ingress %s: nothing of aerie's is for outside the cluster", dir, o.name)
			}
			if o.kind != "Service" {
				continue
			}
			if typ := str(o.m, "spec", "type"); typ != "" && typ != "ClusterIP" {
				t.Errorf("%s: Service %s is of type %s: the live page has no login, keep every Service ClusterIP", dir, o.name, typ)
			}
			if len(list(o.m, "spec", "externalIPs")) > 0 {
				t.Errorf("%s: Service %s has externalIPs", dir, o.name)
			}
		}
	}
}

// servicePort reports whether a Service selects s's pod with a port
// named name that leads to s's port.
func servicePort(objs []object, s served, name string) bool {
	for _, o := range objs {
		if o.kind != "Service" || o.namespace != s.ns {
			continue
		}
		sel, _ := get(o.m, "spec", "selector").(map[string]any)
		if len(sel) == 0 || !matches(map[string]any{"matchLabels": sel}, s.labels) {
			continue
		}
		for _, p := range list(o.m, "spec", "ports") {
			target := get(p, "targetPort")
			if str(p, "name") == name && (target == name || target == s.port || target == nil && get(p, "port") == s.port) {
				return true
			}
		}
	}
	return false
}

// TestKubernetesMonitoringComponent renders each kustomization with the
// prometheus-operator component: the PodMonitor scrapes the metrics port
// of every aerie pod, the PrometheusRule is
// deploy/prometheus/aerie-rules.yml, and every other object still
// validates against the schemas (the operator's kinds have none here).
func TestKubernetesMonitoringComponent(t *testing.T) {
	var rules map[string]any
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	v := newValidator(t)
	for _, dir := range kustomizations {
		where := dir + " with " + monitoringComponent
		objs := renderWith(t, dir, monitoringComponent)
		var monitors, ruleObjs []object
		for _, o := range objs {
			switch o.kind {
			case "PodMonitor":
				monitors = append(monitors, o)
			case "PrometheusRule":
				ruleObjs = append(ruleObjs, o)
			default:
				if err := validate(v, o); err != nil {
					t.Errorf("%s: %v", where, err)
				}
			}
		}
		if len(monitors) != 1 || len(ruleObjs) != 1 {
			t.Fatalf("%s: %d PodMonitors and %d PrometheusRules, want one of each", where, len(monitors), len(ruleObjs))
		}
		pm := monitors[0]
		for _, s := range aerieServers(t, where, objs)["metrics"] {
			if pm.namespace != s.ns || !matches(get(pm.m, "spec", "selector"), s.labels) {
				t.Errorf("%s: PodMonitor %s/%s does not select %s", where, pm.namespace, pm.name, s.where)
			}
		}
		eps := list(pm.m, "spec", "podMetricsEndpoints")
		if len(eps) != 1 || str(eps[0], "port") != "metrics" || str(eps[0], "path") != "/metrics" {
			t.Errorf("%s: PodMonitor endpoints %v, want the port named metrics, path /metrics", where, eps)
		}
		pr := ruleObjs[0]
		if pr.namespace != pm.namespace {
			t.Errorf("%s: PrometheusRule in %s, PodMonitor in %s", where, pr.namespace, pm.namespace)
		}
		if !sameJSON(t, get(pr.m, "spec"), rules) {
			t.Errorf("%s: PrometheusRule %s's spec differs from %s: copy the file into %s/prometheusrule.yaml (its header says how)", where, pr.name, rulesFile, monitoringComponent)
		}
	}
}

// sameJSON compares two decoded YAML documents as JSON values (integers
// and floats alike).
func sameJSON(t *testing.T, a, b any) bool {
	t.Helper()
	norm := func(v any) any {
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var out any
		if err := json.Unmarshal(j, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	return reflect.DeepEqual(norm(a), norm(b))
}
