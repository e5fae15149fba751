package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestWriteText(t *testing.T) {
	r := NewRegistry()
	a := r.Counter("frames_total", "Frames received.", Label{"module", "0"})
	b := r.Counter("frames_total", "Frames received.", Label{"module", "1"})
	g := r.Gauge("in_flight", "Frames held.\nSecond line \\ here.")
	r.GaugeFunc("ratio", "Compression ratio.", func() float64 { return 2.5 })
	h := r.Histogram("wait_seconds", "Wait.", []float64{0.001, 0.01}, Label{"stage", `a"b\c`})
	a.Add(3)
	b.Inc()
	g.Add(5)
	g.Add(-2)
	h.Observe(0.0005)
	h.Observe(0.001) // on a bound: counts in it
	h.ObserveDuration(5 * time.Millisecond)
	h.Observe(7)
	var sb strings.Builder
	if err := r.WriteText(&sb); err != nil {
		t.Fatal(err)
	}
	want := `# HELP frames_total Frames received.
# TYPE frames_total counter
frames_total{module="0"} 3
frames_total{module="1"} 1
# HELP in_flight Frames held.\nSecond line \\ here.
# TYPE in_flight gauge
in_flight 3
# HELP ratio Compression ratio.
# TYPE ratio gauge
ratio 2.5
# HELP wait_seconds Wait.
# TYPE wait_seconds histogram
wait_seconds_bucket{stage="a\"b\\c",le="0.001"} 2
wait_seconds_bucket{stage="a\"b\\c",le="0.01"} 3
wait_seconds_bucket{stage="a\"b\\c",le="+Inf"} 4
wait_seconds_sum{stage="a\"b\\c"} 7.0065
wait_seconds_count{stage="a\"b\\c"} 4
`
	if got := sb.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestHistogramSnapshot(t *testing.T) {
	r := NewRegistry()
	h := r.Histogram("h", "", []float64{1, 2, 4, 8})
	for _, v := range []float64{0.5, 1.5, 1.5, 3, 3, 3, 100} {
		h.Observe(v)
	}
	s := h.Snapshot()
	if s.Count != 7 || s.Sum != 112.5 {
		t.Errorf("count %d sum %g, want 7 and 112.5", s.Count, s.Sum)
	}
	for q, want := range map[float64]float64{0: 1, 0.1: 1, 0.4: 2, 0.5: 4, 0.85: 4, 1: 8} {
		if got := s.Quantile(q); got != want {
			t.Errorf("quantile %g = %g, want %g", q, got, want)
		}
	}
	if got := s.Mean(); got != 112.5/7 {
		t.Errorf("mean %g", got)
	}
	if (HistogramSnapshot{}).Quantile(0.5) != 0 {
		t.Error("quantile of nothing is not 0")
	}
}

func TestConcurrentUpdates(t *testing.T) {
	r := NewRegistry()
	c := r.Counter("c", "")
	h := r.Histogram("h", "", LatencyBuckets)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10000 {
				c.Inc()
				h.Observe(0.25)
			}
		}()
	}
	for range 10 { // scrapes while the updates run
		r.WriteText(new(strings.Builder))
	}
	wg.Wait()
	s := h.Snapshot()
	if c.Value() != 40000 || s.Count != 40000 || s.Sum != 10000 {
		t.Errorf("counter %d, histogram count %d sum %g; want 40000, 40000, 10000", c.Value(), s.Count, s.Sum)
	}
}

func TestNoAllocation(t *testing.T) {
	r := NewRegistry()
	c := r.Counter("c", "")
	g := r.Gauge("g", "")
	h := r.Histogram("h", "", LatencyBuckets)
	if n := testing.AllocsPerRun(1000, func() {
		c.Add(2)
		g.Add(1)
		h.ObserveDuration(3 * time.Millisecond)
	}); n != 0 {
		t.Errorf("%g allocations per update", n)
	}
}

func TestRegistrationErrors(t *testing.T) {
	for name, f := range map[string]func(r *Registry){
		"bad name":  func(r *Registry) { r.Counter("1abc", "") },
		"bad label": func(r *Registry) { r.Counter("a", "", Label{"a-b", ""}) },
		"le label":  func(r *Registry) { r.Histogram("a", "", nil, Label{"le", "1"}) },
		"twice":     func(r *Registry) { r.Counter("a", ""); r.Counter("a", "") },
		"two types": func(r *Registry) { r.Counter("a", "", Label{"x", "1"}); r.Gauge("a", "", Label{"x", "2"}) },
		"unsorted":  func(r *Registry) { r.Histogram("a", "", []float64{2, 1}) },
		"same labels fn": func(r *Registry) {
			r.GaugeFunc("a", "", nil, Label{"x", "1"})
			r.GaugeFunc("a", "", nil, Label{"x", "1"})
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f(NewRegistry())
		})
	}
}

func TestServeHTTP(t *testing.T) {
	r := NewRegistry()
	r.Counter("up_total", "Up.").Inc()
	srv := httptest.NewServer(r)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != ContentType {
		t.Errorf("content type %q", ct)
	}
	var sb strings.Builder
	if _, err := io.Copy(&sb, resp.Body); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "\nup_total 1\n") {
		t.Errorf("body:\n%s", sb.String())
	}
}
