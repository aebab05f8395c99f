package status

import (
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

func TestETABandHoldsTheETAOrIsUnknown(t *testing.T) {
	for _, tt := range []struct {
		in   schema.Throughput
		want [3]float64
	}{
		{schema.Throughput{ETASec: 70, ETALowSec: 60, ETAHighSec: 95}, [3]float64{70, 60, 95}},
		{schema.Throughput{ETASec: 70}, [3]float64{70, -1, -1}}, // an aggregator without the band
		{schema.Throughput{ETASec: -1, ETALowSec: -1, ETAHighSec: -1}, [3]float64{-1, -1, -1}},
		{schema.Throughput{}, [3]float64{0, 0, 0}}, // done
	} {
		sec, low, high := eta(&tt.in)
		if got := [3]float64{sec, low, high}; got != tt.want {
			t.Errorf("eta(%v, %v, %v) = %v, want %v", tt.in.ETASec, tt.in.ETALowSec, tt.in.ETAHighSec, got, tt.want)
		}
	}
}
