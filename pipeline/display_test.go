package pipeline

import (
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

func TestETAWithBand(t *testing.T) {
	cases := []struct {
		eta, low, high float64
		want           string
	}{
		{3600, 3300, 4200, "1h0m0s (55m0s to 1h10m0s)"},
		{-1, -1, -1, "unknown"},
		{0, 0, 0, "0s"},
		{90, 90, 90, "1m30s"},
	}
	for _, c := range cases {
		got := etaWithBand(schema.Throughput{ETASec: c.eta, ETALowSec: c.low, ETAHighSec: c.high})
		if got != c.want {
			t.Errorf("ETA %v, band %v to %v: got %q, want %q", c.eta, c.low, c.high, got, c.want)
		}
	}
}
