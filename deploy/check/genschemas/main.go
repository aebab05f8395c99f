// Command genschemas writes the JSON schemas that the deployment check
// validates deploy/kubernetes against, one per kind the manifests use,
// from upstream sources fetched as Go modules:
//
//   - the Kubernetes kinds from k8s.io/kubernetes's published OpenAPI v3
//     spec (api/openapi-spec/v3),
//   - KEDA's ScaledObject from the CRD in github.com/kedacore/keda/v2
//     (config/crd/bases), its metadata checked as Kubernetes' ObjectMeta.
//
// Each schema is standalone (every $ref points into its own definitions)
// and strict: an object that lists its properties admits no others, so a
// misspelt field is an error rather than silently ignored. The file names
// follow kubeconform's {{ .ResourceKind }}{{ .KindSuffix }}.json.
//
// Run it with `make deploy-schemas`; it needs the Go module proxy.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// kind is one kind the manifests use.
type kind struct {
	apiVersion, kind string
	// spec is the OpenAPI v3 file of its group/version in
	// api/openapi-spec/v3, def the definition's name there. Empty spec:
	// a KEDA CRD, crd naming its file in config/crd/bases.
	spec, def, crd string
}

var kinds = []kind{
	{apiVersion: "v1", kind: "Namespace", spec: "api__v1_openapi.json", def: "io.k8s.api.core.v1.Namespace"},
	{apiVersion: "v1", kind: "ConfigMap", spec: "api__v1_openapi.json", def: "io.k8s.api.core.v1.ConfigMap"},
	{apiVersion: "v1", kind: "Secret", spec: "api__v1_openapi.json", def: "io.k8s.api.core.v1.Secret"},
	{apiVersion: "v1", kind: "Service", spec: "api__v1_openapi.json", def: "io.k8s.api.core.v1.Service"},
	{apiVersion: "apps/v1", kind: "Deployment", spec: "apis__apps__v1_openapi.json", def: "io.k8s.api.apps.v1.Deployment"},
	{apiVersion: "apps/v1", kind: "StatefulSet", spec: "apis__apps__v1_openapi.json", def: "io.k8s.api.apps.v1.StatefulSet"},
	{apiVersion: "networking.k8s.io/v1", kind: "NetworkPolicy", spec: "apis__networking.k8s.io__v1_openapi.json", def: "io.k8s.api.networking.v1.NetworkPolicy"},
	{apiVersion: "keda.sh/v1alpha1", kind: "ScaledObject", crd: "keda.sh_scaledobjects.yaml"},
}

const objectMeta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

func main() {
	k8s := flag.String("kubernetes", "", "k8s.io/kubernetes module version, e.g. v1.37.2")
	keda := flag.String("keda", "", "github.com/kedacore/keda/v2 module version, e.g. v2.21.0")
	out := flag.String("out", "", "directory to write the schemas to")
	flag.Parse()
	if *k8s == "" || *keda == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "genschemas: -kubernetes, -keda and -out are required")
		os.Exit(2)
	}
	if err := run(*k8s, *keda, *out); err != nil {
		fmt.Fprintln(os.Stderr, "genschemas:", err)
		os.Exit(1)
	}
}

func run(k8sVersion, kedaVersion, out string) error {
	k8sDir, err := moduleDir("k8s.io/kubernetes@" + k8sVersion)
	if err != nil {
		return err
	}
	kedaDir, err := moduleDir("github.com/kedacore/keda/v2@" + kedaVersion)
	if err != nil {
		return err
	}
	specs := map[string]map[string]any{}
	load := func(file string) (map[string]any, error) {
		if s, ok := specs[file]; ok {
			return s, nil
		}
		s, err := loadComponents(filepath.Join(k8sDir, "api", "openapi-spec", "v3", file))
		if err == nil {
			specs[file] = s
		}
		return s, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, k := range kinds {
		var schema map[string]any
		if k.crd != "" {
			core, err := load("api__v1_openapi.json")
			if err != nil {
				return err
			}
			schema, err = crdSchema(filepath.Join(kedaDir, "config", "crd", "bases", k.crd), k, core)
			if err != nil {
				return err
			}
		} else {
			comps, err := load(k.spec)
			if err != nil {
				return err
			}
			schema, err = standalone(comps, k.def)
			if err != nil {
				return err
			}
		}
		pin(schema, k)
		strict(schema)
		b, err := json.MarshalIndent(schema, "", "  ")
		if err != nil {
			return err
		}
		path := filepath.Join(out, fileName(k))
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}

// fileName is kubeconform's {{ .ResourceKind }}{{ .KindSuffix }}.json.
func fileName(k kind) string {
	group, version, found := strings.Cut(k.apiVersion, "/")
	suffix := "-" + strings.ToLower(strings.Split(group, ".")[0])
	if found {
		suffix += "-" + strings.ToLower(version)
	}
	return strings.ToLower(k.kind) + suffix + ".json"
}

// moduleDir downloads a module through the Go module proxy and returns
// the directory of its extracted files.
func moduleDir(mod string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w: %s", mod, err, stderr.String())
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(b, &info); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", mod, err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", mod, info.Error)
	}
	return info.Dir, nil
}

func loadComponents(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return doc.Components.Schemas, nil
}

const refPrefix = "#/components/schemas/"

// standalone returns definition def of comps with every definition it
// reaches, directly or not, under "definitions", its references
// rewritten to point there.
func standalone(comps map[string]any, def string) (map[string]any, error) {
	root, ok := comps[def].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("no definition %s", def)
	}
	defs := map[string]any{}
	var visit func(v any) error
	visit = func(v any) error {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok && strings.HasPrefix(ref, refPrefix) {
				name := strings.TrimPrefix(ref, refPrefix)
				v["$ref"] = "#/definitions/" + name
				if _, seen := defs[name]; !seen {
					d, ok := comps[name]
					if !ok {
						return fmt.Errorf("%s: dangling reference %s", def, ref)
					}
					d = deepCopy(d)
					defs[name] = d
					if err := visit(d); err != nil {
						return err
					}
				}
			}
			for _, k := range sortedKeys(v) {
				if err := visit(v[k]); err != nil {
					return err
				}
			}
		case []any:
			for _, e := range v {
				if err := visit(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	out := deepCopy(root).(map[string]any)
	if err := visit(out); err != nil {
		return nil, err
	}
	if len(defs) > 0 {
		out["definitions"] = defs
	}
	return out, nil
}

// crdSchema returns the openAPIV3Schema of the CRD's version k.apiVersion,
// with metadata checked as Kubernetes' ObjectMeta (a CRD says only
// "object" there).
func crdSchema(path string, k kind, core map[string]any) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var crd struct {
		Spec struct {
			Group    string `json:"group"`
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, v := range crd.Spec.Versions {
		if crd.Spec.Group+"/"+v.Name != k.apiVersion {
			continue
		}
		s := v.Schema.OpenAPIV3Schema
		if s == nil {
			return nil, fmt.Errorf("%s: version %s has no openAPIV3Schema", path, v.Name)
		}
		meta, err := standalone(core, objectMeta)
		if err != nil {
			return nil, err
		}
		defs, _ := meta["definitions"].(map[string]any)
		if defs == nil {
			defs = map[string]any{}
		}
		delete(meta, "definitions")
		defs[objectMeta] = meta
		props, _ := s["properties"].(map[string]any)
		if props == nil {
			return nil, fmt.Errorf("%s: schema without properties", path)
		}
		props["metadata"] = map[string]any{"$ref": "#/definitions/" + objectMeta}
		s["definitions"] = defs
		return s, nil
	}
	return nil, fmt.Errorf("%s: no version %s", path, k.apiVersion)
}

// pin makes the schema accept only its own apiVersion and kind, which
// both must be given.
func pin(s map[string]any, k kind) {
	props, _ := s["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		s["properties"] = props
	}
	props["apiVersion"] = map[string]any{"type": "string", "enum": []any{k.apiVersion}}
	props["kind"] = map[string]any{"type": "string", "enum": []any{k.kind}}
	req := map[string]bool{"apiVersion": true, "kind": true}
	var list []any
	if r, ok := s["required"].([]any); ok {
		for _, e := range r {
			if name, ok := e.(string); ok {
				delete(req, name)
			}
			list = append(list, e)
		}
	}
	for _, name := range []string{"apiVersion", "kind"} {
		if req[name] {
			list = append(list, name)
		}
	}
	s["required"] = list
}

// strict forbids properties an object schema does not list, except where
// the schema keeps unknown fields on purpose
// (x-kubernetes-preserve-unknown-fields) or says what else it admits. It
// walks the schema keywords that hold schemas, so a field that happens to
// be called "properties" is not taken for the keyword.
func strict(s any) {
	m, ok := s.(map[string]any)
	if !ok {
		return
	}
	if props, ok := m["properties"].(map[string]any); ok {
		_, has := m["additionalProperties"]
		preserve, _ := m["x-kubernetes-preserve-unknown-fields"].(bool)
		if !has && !preserve {
			m["additionalProperties"] = false
		}
		for _, p := range props {
			strict(p)
		}
	}
	for _, key := range []string{"items", "additionalProperties", "not"} {
		strict(m[key])
	}
	for _, key := range []string{"allOf", "anyOf", "oneOf"} {
		if list, ok := m[key].([]any); ok {
			for _, e := range list {
				strict(e)
			}
		}
	}
	if defs, ok := m["definitions"].(map[string]any); ok {
		for _, d := range defs {
			strict(d)
		}
	}
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, e := range v {
			l[i] = deepCopy(e)
		}
		return l
	default:
		return v
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
