package check

import (
	"encoding/base64"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"sigs.k8s.io/yaml"
)

// chartKeys are the value paths of the NATS Helm chart (nats 2.14.2,
// values.yaml) that nats-values.yaml may set. The chart publishes no
// values schema, so this list stands in for one: a key outside it would
// be ignored by the chart without a word. Below merge and patch the chart
// takes anything (nats-server configuration, JSON patches), so they end a
// path.
var chartKeys = map[string]bool{
	"config.cluster.enabled":                          true,
	"config.cluster.replicas":                         true,
	"config.cluster.port":                             true,
	"config.cluster.noAdvertise":                      true,
	"config.cluster.routeURLs.user":                   true,
	"config.cluster.routeURLs.password":               true,
	"config.cluster.tls.enabled":                      true,
	"config.cluster.tls.secretName":                   true,
	"config.cluster.merge":                            true,
	"config.cluster.patch":                            true,
	"config.jetstream.enabled":                        true,
	"config.jetstream.fileStore.enabled":              true,
	"config.jetstream.fileStore.dir":                  true,
	"config.jetstream.fileStore.pvc.enabled":          true,
	"config.jetstream.fileStore.pvc.size":             true,
	"config.jetstream.fileStore.pvc.storageClassName": true,
	"config.jetstream.fileStore.maxSize":              true,
	"config.jetstream.memoryStore.enabled":            true,
	"config.jetstream.merge":                          true,
	"config.nats.tls.enabled":                         true,
	"config.nats.tls.secretName":                      true,
	"config.monitor.enabled":                          true,
	"config.merge":                                    true,
	"container.image.tag":                             true,
	"container.env":                                   true,
	"container.merge":                                 true,
	"container.patch":                                 true,
	"podTemplate.topologySpreadConstraints":           true,
	"podTemplate.merge":                               true,
	"podTemplate.patch":                               true,
	"natsBox.enabled":                                 true,
	"promExporter.enabled":                            true,
}

// TestNATSValues checks nats-values.yaml: only keys the chart documents,
// a three-node JetStream cluster on file-store PVCs with sync_interval
// always and 8MB max_payload, and aerie's users.conf included from the
// ConfigMap that deploy/kubernetes/cluster generates, mounted where the
// include looks for it.
func TestNATSValues(t *testing.T) {
	file := filepath.Join(kubeDir, "nats-values.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.UnmarshalStrict(b, &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var unknown []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, e := range m {
			p := strings.TrimPrefix(prefix+"."+k, ".")
			if chartKeys[p] {
				continue
			}
			if sub, ok := e.(map[string]any); ok {
				walk(p, sub)
				continue
			}
			unknown = append(unknown, p)
		}
	}
	walk("", v)
	sort.Strings(unknown)
	for _, p := range unknown {
		t.Errorf("%s: %s is not a value the NATS chart documents", file, p)
	}

	want := map[string]any{
		"config.cluster.enabled":                 true,
		"config.cluster.replicas":                float64(3),
		"config.jetstream.enabled":               true,
		"config.jetstream.fileStore.enabled":     true,
		"config.jetstream.fileStore.pvc.enabled": true,
		"config.jetstream.merge.sync_interval":   "always",
		"config.merge.max_payload":               "<< 8MB >>",
		"natsBox.enabled":                        false,
	}
	for p, w := range want {
		if got := get(v, pathKeys(p)...); got != w {
			t.Errorf("%s: %s is %v, want %v", file, p, got, w)
		}
	}

	// The include: relative to /etc/nats-config, where the chart writes
	// nats.conf; it must land on the mounted ConfigMap's users.conf.
	var include string
	merge, _ := get(v, "config", "merge").(map[string]any)
	for k, e := range merge {
		if strings.HasSuffix(k, "$include") {
			include, _ = e.(string)
		}
	}
	if include == "" {
		t.Fatalf("%s: config.merge has no $include of users.conf: the servers would admit anyone", file)
	}
	included := path.Join("/etc/nats-config", include)
	var mountPath, volume string
	for _, p := range list(v, "container", "patch") {
		if str(p, "path") == "/volumeMounts/-" && path.Join(str(p, "value", "mountPath"), path.Base(included)) == included {
			mountPath, volume = str(p, "value", "mountPath"), str(p, "value", "name")
		}
	}
	if path.Join(mountPath, "users.conf") != included {
		t.Errorf("%s: the servers include %s, but the users volume is mounted at %q", file, included, mountPath)
	}
	var configMap string
	for _, p := range list(v, "podTemplate", "patch") {
		if str(p, "path") == "/spec/volumes/-" && str(p, "value", "name") == volume {
			configMap = str(p, "value", "configMap", "name")
		}
	}
	users := find(t, render(t, kustomizations[0]), "ConfigMap", "nats-aerie-users")
	if configMap != users.name || users.namespace != "nats" {
		t.Errorf("%s: mounts ConfigMap %q, but deploy/kubernetes/cluster generates %s/%s", file, configMap, users.namespace, users.name)
	}
	if _, ok := get(users.m, "data", path.Base(included)).(string); !ok {
		t.Errorf("ConfigMap %s has no %s", users.name, path.Base(included))
	}

	checkRoutes(t, file, v)
}

// checkRoutes checks that the cluster routes are authenticated without
// the route secret in the values (the chart would copy it into its
// ConfigMap): the chart's bare routes removed, and the cluster block
// ending with an include of routes.conf from a mounted Secret that
// deploy/kubernetes/cluster generates, which nats-server reads as the
// route authorization and one route per replica, to the chart's pods,
// each presenting those credentials.
func checkRoutes(t *testing.T, file string, v map[string]any) {
	t.Helper()
	if get(v, "config", "cluster", "routeURLs", "user") != nil || get(v, "config", "cluster", "routeURLs", "password") != nil {
		t.Errorf("%s: config.cluster.routeURLs.user/password would put the route password into the chart's ConfigMap; the routes come from routes.conf", file)
	}
	removed := false
	for _, p := range list(v, "config", "cluster", "patch") {
		if str(p, "op") == "remove" && str(p, "path") == "/routes" {
			removed = true
		}
	}
	if !removed {
		t.Errorf("%s: config.cluster.patch does not remove the chart's routes: they carry no credentials, and nats-server presents on a configured route only those in its URL", file)
	}
	var include string
	merge, _ := get(v, "config", "cluster", "merge").(map[string]any)
	for k, e := range merge {
		if strings.HasSuffix(k, "$include") {
			include, _ = e.(string)
			// The chart writes the block's keys in sorted order; the
			// include must come after every key of the chart's.
			for _, chart := range []string{"name", "no_advertise", "port", "routes", "authorization", "tls"} {
				if k < chart {
					t.Errorf("%s: config.cluster.merge key %s sorts before the chart's %s, whose value would then replace the included one", file, k, chart)
				}
			}
		}
	}
	if include == "" {
		t.Fatalf("%s: config.cluster.merge has no $include of routes.conf: the routes would be unauthenticated", file)
	}
	included := path.Join("/etc/nats-config", include)
	var volume string
	for _, p := range list(v, "container", "patch") {
		if str(p, "path") == "/volumeMounts/-" && path.Join(str(p, "value", "mountPath"), path.Base(included)) == included {
			volume = str(p, "value", "name")
		}
	}
	if volume == "" {
		t.Fatalf("%s: the servers include %s, but no volume is mounted at %s", file, included, path.Dir(included))
	}
	var secretName string
	for _, p := range list(v, "podTemplate", "patch") {
		if str(p, "path") == "/spec/volumes/-" && str(p, "value", "name") == volume {
			secretName = str(p, "value", "secret", "secretName")
			if get(p, "value", "configMap") != nil {
				t.Errorf("%s: volume %s is a ConfigMap; routes.conf holds the route secret", file, volume)
			}
		}
	}
	routes := find(t, render(t, kustomizations[0]), "Secret", "nats-aerie-routes")
	if secretName != routes.name || routes.namespace != "nats" {
		t.Fatalf("%s: mounts Secret %q at %s, but deploy/kubernetes/cluster generates %s/%s", file, secretName, path.Dir(included), routes.namespace, routes.name)
	}
	enc, _ := get(routes.m, "data", path.Base(included)).(string)
	conf, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(conf) == 0 {
		t.Fatalf("Secret %s has no %s (%v)", routes.name, path.Base(included), err)
	}

	// nats-server reads a cluster block shaped as the chart writes it,
	// its routes removed, the include last.
	dir := t.TempDir()
	confDir := filepath.Join(dir, "etc", "nats-config")
	incPath := filepath.Join(confDir, filepath.FromSlash(include))
	if err := os.MkdirAll(filepath.Dir(incPath), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(confDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(incPath, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	port := 6222
	if p, ok := get(v, "config", "cluster", "port").(float64); ok {
		port = int(p)
	}
	natsConf := fmt.Sprintf("server_name: nats-0\nport: 4222\ncluster {\n  name: nats\n  port: %d\n  no_advertise: true\n  include %s;\n}\n", port, include)
	if err := os.WriteFile(filepath.Join(confDir, "nats.conf"), []byte(natsConf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(confDir, "nats.conf"))
	if err != nil {
		t.Fatalf("nats-server does not take the cluster block with routes.conf: %v", err)
	}
	if opts.Cluster.Username != routeUser || len(opts.Cluster.Password) < 32 {
		t.Errorf("routes.conf: route authorization user %q, password of %d characters; want %s and the route secret", opts.Cluster.Username, len(opts.Cluster.Password), routeUser)
	}
	replicas, _ := get(v, "config", "cluster", "replicas").(float64)
	var hosts []string
	for _, r := range opts.Routes {
		hosts = append(hosts, r.Host)
		pass, _ := r.User.Password()
		if r.User.Username() != opts.Cluster.Username || pass != opts.Cluster.Password {
			t.Errorf("routes.conf: route to %s does not present the route authorization's credentials: the other nodes would refuse it", r.Host)
		}
	}
	var want []string
	for i := range int(replicas) {
		want = append(want, fmt.Sprintf("nats-%d.nats-headless:%d", i, port))
	}
	if !slices.Equal(hosts, want) {
		t.Errorf("routes.conf routes to %v, want the chart's %d pods %v (auth init --routes, README.md)", hosts, int(replicas), want)
	}
	if !slices.Equal(want, natsRoutes) {
		t.Errorf("the chart's routes are %v, but the check writes routes.conf for %v", want, natsRoutes)
	}
}

func pathKeys(p string) []any {
	var out []any
	for _, k := range strings.Split(p, ".") {
		out = append(out, k)
	}
	return out
}
