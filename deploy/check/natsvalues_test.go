package check

import (
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"

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
		if str(p, "path") == "/volumeMounts/-" {
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
}

func pathKeys(p string) []any {
	var out []any
	for _, k := range strings.Split(p, ".") {
		out = append(out, k)
	}
	return out
}
