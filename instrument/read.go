package instrument

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Value returns the value of a counter or gauge, as a scrape would read
// it; NaN for another kind of metric. It allocates: call it at sampling
// time, not per frame.
func Value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return math.NaN()
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	return math.NaN()
}

// HistogramSnapshot is a histogram's state at one moment.
type HistogramSnapshot struct {
	Bounds []float64 // upper bounds of the buckets, without +Inf
	Counts []uint64  // cumulative: observations <= Bounds[i]
	Count  uint64    // observations
	Sum    float64   // sum of the observations
}

// Snapshot returns what h has counted so far; the zero snapshot when h
// cannot be read.
func Snapshot(h prometheus.Histogram) HistogramSnapshot {
	var d dto.Metric
	if err := h.Write(&d); err != nil || d.Histogram == nil {
		return HistogramSnapshot{}
	}
	hd := d.Histogram
	s := HistogramSnapshot{Count: hd.GetSampleCount(), Sum: hd.GetSampleSum()}
	for _, b := range hd.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue
		}
		s.Bounds = append(s.Bounds, b.GetUpperBound())
		s.Counts = append(s.Counts, b.GetCumulativeCount())
	}
	return s
}

// Mean returns the mean observation, or 0 when there is none.
func (s HistogramSnapshot) Mean() float64 {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / float64(s.Count)
}

// Quantile returns an estimate of the q-quantile (0 <= q <= 1): the upper
// bound of the bucket it falls in, or the largest finite bound when it
// falls beyond. It returns 0 when there is no observation.
func (s HistogramSnapshot) Quantile(q float64) float64 {
	if s.Count == 0 || len(s.Bounds) == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(s.Count)))
	for i, b := range s.Bounds {
		if s.Counts[i] >= rank {
			return b
		}
	}
	return s.Bounds[len(s.Bounds)-1]
}
