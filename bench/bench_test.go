package bench

import "testing"

// TestBenchRowStatistics checks best, median and spread on rounds whose
// answers are known, odd and even in number.
func TestBenchRowStatistics(t *testing.T) {
	for _, tt := range []struct {
		secs                 []float64
		best, median, spread float64
	}{
		{[]float64{3, 1, 2}, 1, 2, 2},
		{[]float64{4, 2, 8, 2}, 2, 3, 3},
		{[]float64{5}, 5, 5, 0},
	} {
		r := row{frames: 10, secs: tt.secs}
		if r.best() != tt.best || r.median() != tt.median || r.spread() != tt.spread {
			t.Errorf("rounds %v: best %g median %g spread %g, want %g %g %g", tt.secs, r.best(), r.median(), r.spread(), tt.best, tt.median, tt.spread)
		}
	}
}
