// Package metricstest scrapes aerie's /metrics endpoint in tests.
package metricstest

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families is one scrape: the metric families by name.
type Families map[string]*dto.MetricFamily

// Scrape fetches and parses url (a /metrics endpoint) in the text format.
func Scrape(url string) (Families, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// Sum is the sum over the series of family name whose labels include
// every name=value pair of match: a counter's or gauge's value, a
// histogram's count. ok is false when no series matches.
func (f Families) Sum(name string, match ...string) (sum float64, ok bool) {
	fam := f[name]
	if fam == nil {
		return 0, false
	}
series:
	for _, m := range fam.GetMetric() {
		for i := 0; i+1 < len(match); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == match[i] && l.GetValue() == match[i+1] {
					found = true
				}
			}
			if !found {
				continue series
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, ok
}

// Gather collects g's metrics as a scrape would see them, failing t if
// they cannot be collected.
func Gather(t testing.TB, g prometheus.Gatherer) Families {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	f := Families{}
	for _, fam := range fams {
		f[fam.GetName()] = fam
	}
	return f
}
