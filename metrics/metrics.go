// Package metrics keeps counters, gauges and histograms that a program
// updates from its hot paths without locks or allocation, and writes them in
// the Prometheus text exposition format (version 0.0.4).
//
// A Registry holds metric families, each a name, a help text, a type and one
// series per set of label values. Metrics are created once, at start, and
// updated with atomic operations; gauges and counters whose value lives
// elsewhere are read by a function at scrape time.
package metrics

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Label is one label of a series: a name and its value.
type Label struct{ Name, Value string }

// Registry holds metric families and writes them out. Its methods are safe
// for concurrent use; metrics are meant to be created at start, not per
// event.
type Registry struct {
	mu       sync.Mutex
	families []*family
	byName   map[string]*family
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{byName: map[string]*family{}} }

// family is every series of one metric name.
type family struct {
	name, help, kind string // kind: counter, gauge or histogram
	series           []series
}

// series is one set of label values of a family and the metric behind it.
type series struct {
	labels string // rendered: {a="1",b="2"}, or empty
	m      Metric
}

// Metric is a Counter, Gauge or Histogram, to Register.
type Metric interface {
	kind() string
	write(w *bufio.Writer, name, labels string)
}

// Counter is a count that only goes up. Its methods are safe for concurrent
// use and allocate nothing.
type Counter struct{ v atomic.Uint64 }

// Add adds n to the counter.
func (c *Counter) Add(n uint64) { c.v.Add(n) }

// Inc adds one to the counter.
func (c *Counter) Inc() { c.v.Add(1) }

// Value returns the counter's value.
func (c *Counter) Value() uint64 { return c.v.Load() }

func (*Counter) kind() string { return "counter" }

func (c *Counter) write(w *bufio.Writer, name, labels string) {
	sample(w, name, labels, float64(c.v.Load()))
}

// Gauge is a value that goes up and down. Its methods are safe for
// concurrent use and allocate nothing.
type Gauge struct{ v atomic.Int64 }

// Add adds n (which may be negative) to the gauge.
func (g *Gauge) Add(n int64) { g.v.Add(n) }

// Set sets the gauge to v.
func (g *Gauge) Set(v int64) { g.v.Store(v) }

// Value returns the gauge's value.
func (g *Gauge) Value() int64 { return g.v.Load() }

func (*Gauge) kind() string { return "gauge" }

func (g *Gauge) write(w *bufio.Writer, name, labels string) {
	sample(w, name, labels, float64(g.v.Load()))
}

// funcMetric is a value read at scrape time.
type funcMetric struct {
	k string
	f func() float64
}

func (m funcMetric) kind() string { return m.k }

func (m funcMetric) write(w *bufio.Writer, name, labels string) { sample(w, name, labels, m.f()) }

// Histogram counts observations in fixed buckets and sums them. Its methods
// are safe for concurrent use and allocate nothing.
type Histogram struct {
	bounds []float64       // upper bounds, ascending
	counts []atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sum    atomic.Uint64   // float64 bits
}

// NewHistogram returns a histogram with the given bucket upper bounds,
// which must ascend.
func NewHistogram(bounds []float64) *Histogram {
	if !sort.Float64sAreSorted(bounds) {
		panic("metrics: histogram bucket bounds do not ascend")
	}
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

func (*Histogram) kind() string { return "histogram" }

// Observe records one observation of v.
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound >= v
	h.counts[i].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// ObserveDuration records d in seconds.
func (h *Histogram) ObserveDuration(d time.Duration) { h.Observe(d.Seconds()) }

// HistogramSnapshot is a histogram's state at one moment.
type HistogramSnapshot struct {
	Bounds []float64 // upper bounds of the buckets, without +Inf
	Counts []uint64  // cumulative: observations <= Bounds[i]; the last is every observation
	Count  uint64    // observations
	Sum    float64   // sum of the observations
}

// Snapshot returns the histogram's counts so far.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Bounds: h.bounds, Counts: make([]uint64, len(h.counts))}
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
		s.Counts[i] = n
	}
	s.Count = n
	s.Sum = math.Float64frombits(h.sum.Load())
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
// bound of the bucket it falls in, or the largest finite bound when it falls
// beyond. It returns 0 when there is no observation.
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

func (h *Histogram) write(w *bufio.Writer, name, labels string) {
	s := h.Snapshot()
	for i, b := range s.Bounds {
		sample(w, name+"_bucket", withLabel(labels, "le", formatFloat(b)), float64(s.Counts[i]))
	}
	sample(w, name+"_bucket", withLabel(labels, "le", "+Inf"), float64(s.Count))
	sample(w, name+"_sum", labels, s.Sum)
	sample(w, name+"_count", labels, float64(s.Count))
}

// ExponentialBuckets returns n upper bounds, the first start and each factor
// times the one before.
func ExponentialBuckets(start, factor float64, n int) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}

// LatencyBuckets are the bounds, in seconds, of the stage latency
// histograms: 10 µs to about 10 s, one bucket per doubling. Treat it as
// read-only.
var LatencyBuckets = ExponentialBuckets(10e-6, 2, 21)

// Counter returns a new counter, registered under name with the labels.
// It and the other methods that register panic on an invalid name, a name
// registered with another type, or a series registered twice: those are
// programming errors.
func (r *Registry) Counter(name, help string, labels ...Label) *Counter {
	c := new(Counter)
	r.Register(name, help, c, labels...)
	return c
}

// CounterFunc registers a counter whose value f returns at scrape time. f
// must be safe to call from any goroutine.
func (r *Registry) CounterFunc(name, help string, f func() float64, labels ...Label) {
	r.Register(name, help, funcMetric{"counter", f}, labels...)
}

// Gauge returns a new gauge, registered under name with the labels.
func (r *Registry) Gauge(name, help string, labels ...Label) *Gauge {
	g := new(Gauge)
	r.Register(name, help, g, labels...)
	return g
}

// GaugeFunc registers a gauge whose value f returns at scrape time. f must
// be safe to call from any goroutine.
func (r *Registry) GaugeFunc(name, help string, f func() float64, labels ...Label) {
	r.Register(name, help, funcMetric{"gauge", f}, labels...)
}

// Histogram returns a new histogram with the given bucket upper bounds,
// which must ascend, registered under name with the labels.
func (r *Registry) Histogram(name, help string, bounds []float64, labels ...Label) *Histogram {
	h := NewHistogram(bounds)
	r.Register(name, help, h, labels...)
	return h
}

// Register adds m, made before, under name with the labels: a metric kept
// by code that does not know the registry. A metric is registered once.
func (r *Registry) Register(name, help string, m Metric, labels ...Label) {
	kind := m.kind()
	if !validName(name, true) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
	var b strings.Builder
	for i, l := range labels {
		if !validName(l.Name, false) || l.Name == "le" {
			panic(fmt.Sprintf("metrics: %s: invalid label name %q", name, l.Name))
		}
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(l.Name)
		b.WriteString(`="`)
		b.WriteString(escape(l.Value, true))
		b.WriteByte('"')
	}
	if len(labels) > 0 {
		b.WriteByte('}')
	}
	rendered := b.String()

	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.byName[name]
	if !ok {
		f = &family{name: name, help: help, kind: kind}
		r.byName[name] = f
		r.families = append(r.families, f)
	}
	if f.kind != kind {
		panic(fmt.Sprintf("metrics: %s registered as a %s and as a %s", name, f.kind, kind))
	}
	for _, s := range f.series {
		if s.labels == rendered {
			panic(fmt.Sprintf("metrics: series %s%s registered twice", name, rendered))
		}
	}
	f.series = append(f.series, series{labels: rendered, m: m})
}

// WriteText writes every family in the Prometheus text format, in the order
// they were first registered.
func (r *Registry) WriteText(w io.Writer) error {
	r.mu.Lock()
	families := make([]family, len(r.families))
	for i, f := range r.families {
		families[i] = *f
		families[i].series = append([]series(nil), f.series...)
	}
	r.mu.Unlock()
	bw := bufio.NewWriter(w)
	for _, f := range families {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.name, escape(f.help, false), f.name, f.kind)
		for _, s := range f.series {
			s.m.write(bw, f.name, s.labels)
		}
	}
	return bw.Flush()
}

// ContentType is the media type of the text format.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// ServeHTTP serves the registry in the text format.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", ContentType)
	r.WriteText(w) // an error here is the client's going away
}

func sample(w *bufio.Writer, name, labels string, v float64) {
	w.WriteString(name)
	w.WriteString(labels)
	w.WriteByte(' ')
	w.WriteString(formatFloat(v))
	w.WriteByte('\n')
}

// withLabel adds one label to rendered labels.
func withLabel(labels, name, value string) string {
	l := name + `="` + value + `"}`
	if labels == "" {
		return "{" + l
	}
	return labels[:len(labels)-1] + "," + l
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// escape escapes a help text (backslash, newline) or a label value (also
// the double quote).
func escape(s string, quote bool) string {
	if !strings.ContainsAny(s, "\\\n\"") {
		return s
	}
	var b strings.Builder
	for _, c := range s {
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '"' && quote:
			b.WriteString(`\"`)
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// validName reports whether s is a valid metric name (colons allowed) or
// label name.
func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		ok := c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' || colon && c == ':'
		if !ok {
			return false
		}
	}
	return true
}
