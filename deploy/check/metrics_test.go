package check

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

var (
	metricNamesFile = filepath.Join(root, "metrics", "names.txt")
	dashboardFile   = filepath.Join(root, "deploy", "grafana", "aerie.json")
	rulesFile       = filepath.Join(root, "deploy", "prometheus", "aerie-rules.yml")
)

// exported reads metrics/names.txt: every metric family aerie exports,
// kept true by a test in aerie's own module (metrics/names_test.go).
func exported(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(metricNamesFile)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			names[l] = true
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s lists no metric", metricNamesFile)
	}
	return names
}

var promql = parser.NewParser(parser.Options{})

// metricsIn parses a PromQL expression and returns the metric names it
// selects.
func metricsIn(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names, nil
}

// known reports whether name is an exported family, or a histogram's
// _bucket, _sum or _count series of one.
func known(names map[string]bool, name string) bool {
	if names[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

// grafanaVars are the dashboard's variables as a query sees them once
// Grafana has substituted them.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h")

// labelValues is a Grafana variable query: label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// TestDashboard checks deploy/grafana/aerie.json: valid JSON, every query
// valid PromQL once Grafana's variables are substituted, and every metric
// one aerie exports.
func TestDashboard(t *testing.T) {
	names := exported(t)
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.UID == "" {
		t.Error("dashboard has no uid: provisioning would make a new one at every start")
	}
	type query struct{ where, expr string }
	var queries []query
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		queries = append(queries, query{"variable " + v.Name, m[1]})
	}
	panels := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		panels++
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries = append(queries, query{"panel " + p.Title, q.Expr})
		}
	}
	if panels == 0 {
		t.Fatal("dashboard has no panels")
	}
	used := 0
	for _, q := range queries {
		ms, err := metricsIn(grafanaVars.Replace(q.expr))
		if err != nil {
			t.Errorf("%s: %q: %v", q.where, q.expr, err)
			continue
		}
		if len(ms) == 0 {
			t.Errorf("%s: %q selects no metric", q.where, q.expr)
		}
		for _, m := range ms {
			used++
			if !known(names, m) {
				t.Errorf("%s: %s is not a metric aerie exports (%s)", q.where, m, metricNamesFile)
			}
		}
	}
	t.Logf("%d panels, %d queries, %d metric selectors", panels, len(queries), used)
}

// TestAlertRules checks deploy/prometheus/aerie-rules.yml with
// Prometheus's own rule file parser (which also parses every expression
// and template), and that every metric it uses is one aerie exports.
func TestAlertRules(t *testing.T) {
	names := exported(t)
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			ms, err := metricsIn(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
				continue
			}
			for _, m := range ms {
				if !known(names, m) {
					t.Errorf("alert %s: %s is not a metric aerie exports (%s)", r.Alert, m, metricNamesFile)
				}
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s has no summary", r.Alert)
			}
		}
	}
	for _, want := range []string{"AerieNoProgress", "AerieWorkerBreakerOpen", "AerieFailuresRising", "AerieDataDiskNearlyFull"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s (have %v)", want, alerts)
		}
	}
}

// TestComposeMonitoring checks the compose demo's monitoring profile:
// Prometheus scrapes the metrics port of every aerie worker and the
// aggregator and loads the shipped alert rules; Grafana is provisioned
// with Prometheus and the shipped dashboard.
func TestComposeMonitoring(t *testing.T) {
	dir, err := filepath.Abs(composeDir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "compose.yaml")}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SetProjectName("aerie", true)
		o.Profiles = []string{"monitoring"}
	})
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	// bind returns the host file mounted at target in service s.
	bind := func(s types.ServiceConfig, target string) string {
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind && v.Target == target {
				if !v.ReadOnly {
					t.Errorf("%s: %s is mounted writable", s.Name, target)
				}
				return v.Source
			}
		}
		t.Errorf("%s: nothing mounted at %s", s.Name, target)
		return ""
	}
	same := func(a, b string) bool {
		x, err1 := filepath.Abs(a)
		y, err2 := filepath.Abs(b)
		return err1 == nil && err2 == nil && x == y
	}

	// Every aerie worker and aggregator serves metrics, and Prometheus
	// scrapes exactly those.
	var want []string
	for name, s := range p.Services {
		if len(s.Command) == 0 || (s.Command[0] != "work" && s.Command[0] != "aggregate") {
			continue
		}
		listen := flagValue(s.Command, "--metrics-listen")
		_, port, err := net.SplitHostPort(listen)
		if err != nil {
			t.Errorf("%s: --metrics-listen %q: want host:port", name, listen)
			continue
		}
		want = append(want, name+":"+port)
	}
	prom, ok := p.Services["prometheus"]
	if !ok {
		t.Fatal("no prometheus service in the monitoring profile")
	}
	if !slices.Contains(prom.Profiles, "monitoring") {
		t.Errorf("prometheus: profiles %v, want monitoring", prom.Profiles)
	}
	confTarget := ""
	for _, a := range prom.Command {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			confTarget = v
		}
	}
	confPath := bind(prom, confTarget)
	var conf struct {
		RuleFiles     []string `json:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	b, err := os.ReadFile(confPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &conf); err != nil {
		t.Fatalf("%s: %v", confPath, err)
	}
	var targets []string
	for _, sc := range conf.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	if !slices.Equal(sorted(targets), sorted(want)) {
		t.Errorf("%s scrapes %v, want every worker's and the aggregator's metrics port %v", confPath, targets, want)
	}
	if len(conf.RuleFiles) != 1 {
		t.Fatalf("%s: rule_files %v, want aerie's rules", confPath, conf.RuleFiles)
	}
	if src := bind(prom, conf.RuleFiles[0]); !same(src, rulesFile) {
		t.Errorf("prometheus: %s comes from %s, want %s", conf.RuleFiles[0], src, rulesFile)
	}

	graf, ok := p.Services["grafana"]
	if !ok {
		t.Fatal("no grafana service in the monitoring profile")
	}
	var provider struct {
		Providers []struct {
			Options struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	dashConf := bind(graf, "/etc/grafana/provisioning/dashboards/aerie.yml")
	if b, err = os.ReadFile(dashConf); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &provider); err != nil || len(provider.Providers) != 1 {
		t.Fatalf("%s: %v, %d providers, want one", dashConf, err, len(provider.Providers))
	}
	if src := bind(graf, provider.Providers[0].Options.Path+"/aerie.json"); !same(src, dashboardFile) {
		t.Errorf("grafana: the dashboard comes from %s, want %s", src, dashboardFile)
	}
	var ds struct {
		Datasources []struct {
			Type string `json:"type"`
			URL  string `json:"url"`
		} `json:"datasources"`
	}
	dsConf := bind(graf, "/etc/grafana/provisioning/datasources/aerie.yml")
	if b, err = os.ReadFile(dsConf); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &ds); err != nil || len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("%s: %+v (%v), want the prometheus service as the one data source", dsConf, ds, err)
	}
}
