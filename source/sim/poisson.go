package sim

import (
	"math"
	"math/rand/v2"
)

// Poisson sampling is the simulator's hot loop: one draw per pixel per
// frame. A draw takes one 64-bit random number. Means below smallMean are
// sampled exactly by inverting the cumulative distribution (the mean
// rounded to 1/meanSteps so that exp(-mean) comes from a table); larger
// means by the normal approximation, with the standard normal quantile
// taken from a table indexed by 16 random bits.
const (
	smallMean = 16
	meanSteps = 128
	maxSmall  = 96 // a cap on the inversion loop; P(k > 96 | mean < 16) is negligible
)

var (
	expNeg  = makeExpNeg()  // exp(-q/meanSteps) for q = 0..smallMean*meanSteps
	invK    = makeInvK()    // 1/k for k = 1..maxSmall
	normalQ = makeNormalQ() // standard normal quantiles of (k+0.5)/65536
)

func makeExpNeg() []float64 {
	t := make([]float64, smallMean*meanSteps+1)
	for q := range t {
		t[q] = math.Exp(-float64(q) / meanSteps)
	}
	return t
}

func makeInvK() []float64 {
	t := make([]float64, maxSmall+1)
	for k := 1; k <= maxSmall; k++ {
		t[k] = 1 / float64(k)
	}
	return t
}

func makeNormalQ() []float32 {
	t := make([]float32, 1<<16)
	for k := range t {
		p := (float64(k) + 0.5) / (1 << 16)
		t[k] = float32(math.Sqrt2 * math.Erfinv(2*p-1))
	}
	return t
}

// poisson draws a Poisson-distributed count of the given mean.
func poisson(r *rand.PCG, mean float32) uint32 {
	x := r.Uint64()
	if mean < smallMean {
		q := int(mean*meanSteps + 0.5)
		if q == 0 {
			return 0
		}
		lambda := float64(q) / meanSteps
		u := float64(x>>11) * (1.0 / (1 << 53))
		p := expNeg[q]
		cdf := p
		k := 0
		for u >= cdf && k < maxSmall {
			k++
			p *= lambda * invK[k]
			cdf += p
		}
		return uint32(k)
	}
	v := float64(mean) + math.Sqrt(float64(mean))*float64(normalQ[x&0xFFFF]) + 0.5
	if v <= 0 {
		return 0
	}
	if v >= math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(v)
}

// sample fills counts with Poisson draws of the means, clipped to max, and
// reports whether any count was clipped.
func sample(r *rand.PCG, counts []uint32, means []float32, max uint32) (clipped bool) {
	for p, m := range means {
		c := poisson(r, m)
		if c > max {
			c = max
			clipped = true
		}
		counts[p] = c
	}
	return clipped
}
