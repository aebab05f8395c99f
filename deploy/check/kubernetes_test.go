package check

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/yannh/kubeconform/pkg/resource"
	"github.com/yannh/kubeconform/pkg/validator"
	"sigs.k8s.io/kustomize/api/krusty"
	kresource "sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

var kubeDir = filepath.Join(root, "deploy", "kubernetes")

// kustomizations are the entry points a user applies with kubectl -k.
var kustomizations = []string{"overlays/standalone", "overlays/vllm-sidecar"}

// object is one rendered manifest.
type object struct {
	kind, name, namespace string
	yaml                  []byte
	m                     map[string]any
}

// render copies deploy/kubernetes to a temporary directory, writes the
// role seeds and route credentials there with `aerie auth init` (as a
// user does before applying), and renders kustomization dir with
// kustomize.
func render(t *testing.T, dir string) []object {
	t.Helper()
	objs, _ := renderAt(t, dir)
	return objs
}

// renderAt is render, also returning the directory auth init wrote.
func renderAt(t *testing.T, dir string) (objs []object, authDir string) {
	t.Helper()
	tmp := t.TempDir()
	if err := copyTree(kubeDir, tmp); err != nil {
		t.Fatal(err)
	}
	authDir = filepath.Join(tmp, "cluster", "auth")
	authInit(t, authDir)
	return build(t, tmp, dir), authDir
}

// renderWith renders kustomization dir with component added to it, as a
// user's overlay that lists it under components does.
func renderWith(t *testing.T, dir, component string) []object {
	t.Helper()
	tmp := t.TempDir()
	if err := copyTree(kubeDir, tmp); err != nil {
		t.Fatal(err)
	}
	authInit(t, filepath.Join(tmp, "cluster", "auth"))
	overlay := filepath.Join(tmp, "overlays", "with-component")
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../../" + dir + "\ncomponents:\n  - ../../" + component + "\n"
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return build(t, tmp, "overlays/with-component")
}

// build runs kustomize on dir of the copy at tmp.
func build(t *testing.T, tmp, dir string) []object {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(tmp, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []object
	for _, r := range rm.Resources() {
		objs = append(objs, toObject(t, r))
	}
	return objs
}

// natsRoutes are the chart's route addresses for release nats with
// config.cluster.replicas 3: <statefulset>-<i>.<headless service>:<port>,
// as the chart writes them (routeURLs.useFQDN false). README.md has the
// operator pass them to auth init --routes.
var natsRoutes = []string{"nats-0.nats-headless:6222", "nats-1.nats-headless:6222", "nats-2.nats-headless:6222"}

// authInit writes the role seeds, users.conf, route.secret and
// routes.conf into dir as README.md has the operator do.
func authInit(t *testing.T, dir string) {
	t.Helper()
	bin := aerieBinary(t)
	out, err := exec.Command(bin, "auth", "init", "--out", dir, "--routes", strings.Join(natsRoutes, ",")).CombinedOutput()
	if err != nil && strings.Contains(string(out), "flag provided but not defined: -routes") {
		// An aerie whose auth init writes no route credentials yet: its
		// seeds and users.conf, and a test route secret with the
		// routes.conf auth init writes for it (the route authorization
		// and the routes with the credentials in their URLs).
		out, err = exec.Command(bin, "auth", "init", "--out", dir).CombinedOutput()
		if err == nil {
			err = writeTestRoutes(dir)
		}
	}
	if err != nil {
		t.Fatalf("aerie auth init: %v\n%s", err, out)
	}
}

func writeTestRoutes(dir string) error {
	const secret = "YWVyaWUgZGVwbG95IGNoZWNrIHJvdXRlIHNlY3JldCE"
	conf := fmt.Sprintf("authorization {\n  user: %q\n  password: %q\n  timeout: 2\n}\nroutes: [\n", routeUser, secret)
	for _, r := range natsRoutes {
		conf += fmt.Sprintf("  %q\n", "nats-route://"+routeUser+":"+secret+"@"+r)
	}
	conf += "]\n"
	if err := os.WriteFile(filepath.Join(dir, "route.secret"), []byte(secret+"\n"), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "routes.conf"), []byte(conf), 0o600)
}

// routeUser is the user every NATS node presents on its routes.
const routeUser = "aerie-route"

func toObject(t *testing.T, r *kresource.Resource) object {
	t.Helper()
	y, err := r.AsYAML()
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Map()
	if err != nil {
		t.Fatal(err)
	}
	return object{kind: r.GetKind(), name: r.GetName(), namespace: r.GetNamespace(), yaml: y, m: m}
}

// copyTree copies the files of src to dst, leaving out what auth/ holds
// (a developer's own seeds).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if filepath.Dir(rel) == filepath.Join("cluster", "auth") && d.Name() != ".gitignore" || filepath.Dir(rel) == "schemas" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// newValidator validates against the committed schemas only
// (deploy/kubernetes/schemas, see its README), strictly: unknown fields
// and duplicate keys are errors, and so is a kind without a schema.
func newValidator(t *testing.T) validator.Validator {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join(kubeDir, "schemas"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := validator.New([]string{dir + "/{{ .ResourceKind }}{{ .KindSuffix }}.json"}, validator.Opts{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func validate(v validator.Validator, o object) error {
	res := v.ValidateResource(resource.Resource{Path: o.kind + "/" + o.name, Bytes: o.yaml})
	if res.Status == validator.Valid {
		return nil
	}
	var msgs []string
	for _, e := range res.ValidationErrors {
		msgs = append(msgs, e.Path+": "+e.Msg)
	}
	if res.Err != nil && len(msgs) == 0 {
		msgs = append(msgs, res.Err.Error())
	}
	return fmt.Errorf("%s %s/%s: %s", statusName(res.Status), o.kind, o.name, strings.Join(msgs, "; "))
}

func statusName(s validator.Status) string {
	switch s {
	case validator.Invalid:
		return "invalid"
	case validator.Error:
		return "error"
	case validator.Skipped:
		return "skipped"
	case validator.Empty:
		return "empty"
	}
	return "status " + strconv.Itoa(int(s))
}

// TestKubernetesSchemas renders every kustomization and validates every
// object against the committed schemas.
func TestKubernetesSchemas(t *testing.T) {
	v := newValidator(t)
	for _, dir := range kustomizations {
		objs := render(t, dir)
		if len(objs) == 0 {
			t.Fatalf("%s renders nothing", dir)
		}
		for _, o := range objs {
			if err := validate(v, o); err != nil {
				t.Errorf("%s: %v", dir, err)
			}
		}
	}
}

// TestKubernetesSchemasStrict checks that the validation catches what it
// is there for: a misspelt field, a value of the wrong type and a kind
// without a schema are each refused.
func TestKubernetesSchemasStrict(t *testing.T) {
	v := newValidator(t)
	worker := find(t, render(t, "overlays/standalone"), "Deployment", "aerie-worker")
	for name, edit := range map[string]func(string) string{
		"misspelt field": func(y string) string {
			return strings.Replace(y, "readOnlyRootFilesystem:", "readOnlyRootFileSystem:", 1)
		},
		"wrong type":   func(y string) string { return strings.Replace(y, "replicas: 1", "replicas: one", 1) },
		"unknown kind": func(y string) string { return strings.Replace(y, "kind: Deployment", "kind: Deploymnet", 1) },
	} {
		bad := worker
		bad.yaml = []byte(edit(string(worker.yaml)))
		if string(bad.yaml) == string(worker.yaml) {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		if err := validate(v, bad); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}

func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.kind == kind && (o.name == name || strings.HasPrefix(o.name, name+"-")) {
			return o
		}
	}
	t.Fatalf("no %s %s among the rendered objects", kind, name)
	return object{}
}

// get walks m along keys (a string is a map key, an int a list index).
func get(m any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			mm, ok := m.(map[string]any)
			if !ok {
				return nil
			}
			m = mm[k]
		case int:
			l, ok := m.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			m = l[k]
		}
	}
	return m
}

func list(m any, keys ...any) []any {
	l, _ := get(m, keys...).([]any)
	return l
}

func str(m any, keys ...any) string {
	s, _ := get(m, keys...).(string)
	return s
}

// TestKubernetesPolicy checks what the schemas cannot: every pod locked
// down (the restricted Pod Security Standard and a read-only root), with
// resource requests, each aerie container holding only its own role's
// seed, the aggregator's volume, probes where there is an endpoint, and
// the KEDA trigger on the run's consumer.
func TestKubernetesPolicy(t *testing.T) {
	stream, consumerPrefix := aerieNames(t)
	for _, dir := range kustomizations {
		objs := render(t, dir)
		cfg := find(t, objs, "ConfigMap", "aerie-config")
		run := str(cfg.m, "data", "AERIE_RUN")
		if run == "" {
			t.Fatalf("%s: aerie-config has no AERIE_RUN", dir)
		}
		secrets := map[string]object{}
		for _, o := range objs {
			if o.kind == "Secret" {
				secrets[o.name] = o
			}
		}
		for _, o := range objs {
			if o.kind != "Deployment" && o.kind != "StatefulSet" {
				continue
			}
			where := dir + ": " + o.kind + "/" + o.name
			pod := get(o.m, "spec", "template", "spec")
			checkPod(t, where, pod)
			for _, c := range list(pod, "containers") {
				checkContainer(t, where, c, pod, secrets, run)
			}
			if o.kind == "StatefulSet" {
				if r, _ := get(o.m, "spec", "replicas").(int); r != 1 {
					t.Errorf("%s: replicas %v: one aggregator writes a run", where, get(o.m, "spec", "replicas"))
				}
				if str(o.m, "spec", "volumeClaimTemplates", 0, "metadata", "name") != "data" {
					t.Errorf("%s: want a volumeClaimTemplate named data", where)
				}
			}
		}

		so := find(t, objs, "ScaledObject", "aerie-worker")
		if target := str(so.m, "spec", "scaleTargetRef", "name"); target != "aerie-worker" {
			t.Errorf("%s: ScaledObject scales %q", dir, target)
		}
		find(t, objs, "Deployment", str(so.m, "spec", "scaleTargetRef", "name"))
		triggers := list(so.m, "spec", "triggers")
		if len(triggers) != 1 || str(triggers[0], "type") != "nats-jetstream" {
			t.Fatalf("%s: want one nats-jetstream trigger, got %v", dir, triggers)
		}
		md, _ := get(triggers[0], "metadata").(map[string]any)
		// The keys KEDA's nats-jetstream scaler documents.
		known := []string{"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold", "activationLagThreshold", "useHttps"}
		for k := range md {
			if !slices.Contains(known, k) {
				t.Errorf("%s: nats-jetstream metadata %s is not one the scaler reads", dir, k)
			}
		}
		for _, k := range []string{"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold"} {
			if md[k] == nil || md[k] == "" {
				t.Errorf("%s: nats-jetstream metadata %s missing", dir, k)
			}
		}
		if md["stream"] != stream || md["consumer"] != consumerPrefix+run {
			t.Errorf("%s: trigger on %v/%v, want the run's consumer %s/%s%s", dir, md["stream"], md["consumer"], stream, consumerPrefix, run)
		}
		if _, err := strconv.Atoi(fmt.Sprint(md["lagThreshold"])); err != nil {
			t.Errorf("%s: lagThreshold %v is not a number", dir, md["lagThreshold"])
		}

		users := find(t, objs, "ConfigMap", "nats-aerie-users")
		if users.name != "nats-aerie-users" || users.namespace != "nats" || str(users.m, "data", "users.conf") == "" {
			t.Errorf("%s: want ConfigMap nats/nats-aerie-users with users.conf (the name nats-values.yaml mounts), got %s/%s", dir, users.namespace, users.name)
		}
	}
}

// aerieNames reads the prompts stream's name and the workers' consumer
// prefix from aerie's schema package, so that the KEDA trigger cannot
// drift from what aerie creates.
func aerieNames(t *testing.T) (stream, consumerPrefix string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "schema", "names.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if id.Name == "PromptsStream" && i < len(n.Values) {
					if lit, ok := n.Values[i].(*ast.BasicLit); ok {
						stream, _ = strconv.Unquote(lit.Value)
					}
				}
			}
		case *ast.FuncDecl:
			if n.Name.Name == "WorkersConsumer" && len(n.Body.List) == 1 {
				if ret, ok := n.Body.List[0].(*ast.ReturnStmt); ok && len(ret.Results) == 1 {
					if bin, ok := ret.Results[0].(*ast.BinaryExpr); ok {
						if lit, ok := bin.X.(*ast.BasicLit); ok {
							consumerPrefix, _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
		return true
	})
	if stream == "" || consumerPrefix == "" {
		t.Fatalf("schema/names.go: PromptsStream %q, WorkersConsumer prefix %q: the check no longer understands it", stream, consumerPrefix)
	}
	return stream, consumerPrefix
}

func checkPod(t *testing.T, where string, pod any) {
	t.Helper()
	if get(pod, "securityContext", "runAsNonRoot") != true {
		t.Errorf("%s: pod securityContext.runAsNonRoot is not true", where)
	}
	if str(pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
		t.Errorf("%s: pod seccompProfile is not RuntimeDefault", where)
	}
	if get(pod, "automountServiceAccountToken") != false {
		t.Errorf("%s: aerie needs no Kubernetes API token: set automountServiceAccountToken: false", where)
	}
}

func checkContainer(t *testing.T, where string, c any, pod any, secrets map[string]object, run string) {
	t.Helper()
	name := str(c, "name")
	where += " container " + name
	sc := get(c, "securityContext")
	if get(sc, "readOnlyRootFilesystem") != true {
		t.Errorf("%s: readOnlyRootFilesystem is not true", where)
	}
	if get(sc, "allowPrivilegeEscalation") != false {
		t.Errorf("%s: allowPrivilegeEscalation is not false", where)
	}
	if drop := list(sc, "capabilities", "drop"); !slices.Contains(drop, any("ALL")) {
		t.Errorf("%s: capabilities.drop is not [ALL]", where)
	}
	for _, r := range []string{"cpu", "memory"} {
		if get(c, "resources", "requests", r) == nil {
			t.Errorf("%s: no %s request", where, r)
		}
	}
	if get(c, "resources", "limits", "memory") == nil {
		t.Errorf("%s: no memory limit", where)
	}
	// aerie's own ports (metrics, the live page) answer as long as the
	// process runs and say nothing of its health: no probes for them.
	if len(list(c, "ports")) > 0 && !observationOnly(c) {
		for _, p := range []string{"readinessProbe", "livenessProbe"} {
			if get(c, p) == nil {
				t.Errorf("%s serves a port but has no %s", where, p)
			}
		}
	}
	args := list(c, "args")
	if len(args) == 0 {
		return
	}
	role, ok := roleOf[fmt.Sprint(args[0])]
	if !ok {
		return
	}
	if !slices.Contains(args, any("--run=$(AERIE_RUN)")) {
		t.Errorf("%s: want --run=$(AERIE_RUN), the run of aerie-config (%s)", where, run)
	}
	// The role's seed: AERIE_NATS_NKEY names a file in a mounted Secret
	// that holds that seed and nothing else.
	var seed string
	for _, e := range list(c, "env") {
		if str(e, "name") == "AERIE_NATS_NKEY" {
			seed = str(e, "value")
		}
	}
	if filepath.Base(seed) != role+".nk" {
		t.Errorf("%s: AERIE_NATS_NKEY %q, want the %s seed", where, seed, role)
		return
	}
	var secretName string
	for _, m := range list(c, "volumeMounts") {
		if str(m, "mountPath") == filepath.Dir(seed) {
			for _, v := range list(pod, "volumes") {
				if str(v, "name") == str(m, "name") {
					secretName = str(v, "secret", "secretName")
					if mode, _ := get(v, "secret", "defaultMode").(int); mode&0o077 != 0 {
						t.Errorf("%s: seed Secret mounted with mode %o, want 0400", where, mode)
					}
					// Secret files belong to root; with fsGroup the kubelet
					// gives that group read access, so the non-root user
					// can read its 0400 seed.
					if get(pod, "securityContext", "fsGroup") != get(pod, "securityContext", "runAsGroup") || get(pod, "securityContext", "fsGroup") == nil {
						t.Errorf("%s: fsGroup %v is not the pod's runAsGroup %v: the seed would be unreadable", where, get(pod, "securityContext", "fsGroup"), get(pod, "securityContext", "runAsGroup"))
					}
				}
			}
		}
	}
	s, ok := secrets[secretName]
	if !ok {
		t.Errorf("%s: %s is not in a mounted Secret of this build (mounted: %q)", where, seed, secretName)
		return
	}
	data, _ := get(s.m, "data").(map[string]any)
	if len(data) != 1 || data[role+".nk"] == nil {
		t.Errorf("%s: Secret %s holds %v, want %s.nk only", where, secretName, keys(data), role)
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
