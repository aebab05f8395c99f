package policy

import (
	"slices"
	"testing"
)

func TestGrantSlots(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
		cs   []Candidate
		want []Grant
	}{
		{"one run takes every slot", 7, []Candidate{{Weight: 1}}, []Grant{{0, 7}}},
		{"equal weights share equally", 8, []Candidate{{Weight: 1}, {Weight: 1}}, []Grant{{0, 4}, {1, 4}}},
		{"weights 3:1", 8, []Candidate{{Weight: 3}, {Weight: 1}}, []Grant{{0, 6}, {1, 2}}},
		{"the run furthest behind first, with the rounding", 1, []Candidate{{Weight: 1, VTime: 50}, {Weight: 1, VTime: 10}}, []Grant{{1, 1}, {0, 0}}},
		{"rounding goes to those behind", 5, []Candidate{{Weight: 1, VTime: 3}, {Weight: 1, VTime: 2}, {Weight: 1, VTime: 1}}, []Grant{{2, 2}, {1, 2}, {0, 1}}},
		{"a higher priority takes every slot", 6, []Candidate{{Weight: 3}, {Priority: 1, Weight: 1, VTime: 99}}, []Grant{{1, 6}, {0, 0}}},
		{"lower priorities follow for backfill, highest first", 2, []Candidate{{Priority: -1, Weight: 1}, {Weight: 1}, {Priority: 5, Weight: 1}}, []Grant{{2, 2}, {1, 0}, {0, 0}}},
		{"no candidates, no grants", 4, nil, []Grant{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := GrantSlots(c.n, c.cs)
			if !slices.Equal(got, c.want) {
				t.Errorf("GrantSlots(%d, %+v) = %v, want %v", c.n, c.cs, got, c.want)
			}
		})
	}
}
