package metrics_test

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/worker"
)

var update = flag.Bool("update", false, "rewrite names.txt from the metrics the worker and the aggregator register")

// describer is a Registerer that keeps the names of the metric families
// its collectors describe.
type describer struct{ names []string }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names = append(d.names, m[1])
		}
	}
	return nil
}

func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d *describer) Unregister(prometheus.Collector) bool { return false }

// names.txt lists every metric family aerie's worker and aggregator
// export, the list deploy/check holds the Grafana dashboard and the alert
// rules to. TestNamesListed keeps it true: go test ./metrics -update
// rewrites it.
func TestNamesListed(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	d := &describer{}
	client, err := openai.New(openai.Config{BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.New(worker.Config{Run: "names", Metrics: d}, js, client); err != nil {
		t.Fatal(err)
	}
	if _, err := aggregator.New(aggregator.Config{Run: "names", DataDir: t.TempDir(), Metrics: d}, js); err != nil {
		t.Fatal(err)
	}
	slices.Sort(d.names)
	got := slices.Compact(d.names)
	for _, n := range got {
		if !strings.HasPrefix(n, "aerie_") {
			t.Errorf("metric %s: aerie's metrics are named aerie_*", n)
		}
	}
	want := readNames(t)
	if *update {
		body := "# Every metric family aerie exports (go test ./metrics -update writes it).\n" + strings.Join(got, "\n") + "\n"
		if err := os.WriteFile("names.txt", []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !slices.Equal(got, want) {
		t.Errorf("names.txt is out of date (run go test ./metrics -update):\n got %v\nwant %v", got, want)
	}
}

func readNames(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("names.txt")
	if err != nil && !*update {
		t.Fatal(err)
	}
	var names []string
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			names = append(names, l)
		}
	}
	return names
}
