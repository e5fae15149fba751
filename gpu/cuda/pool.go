//go:build cgo

package cuda

import (
	"fmt"
	"sync"
)

// HostPool is a fixed set of page-locked host buffers of one size, for
// frame payloads and images: allocated once, handed out and taken back
// with no allocation, freed together by Close. It is safe for concurrent
// use.
type HostPool struct {
	ctx  *Context
	size int
	all  [][]byte
	free chan []byte
	once sync.Once
}

// NewHostPool allocates n page-locked buffers of size bytes each.
func (c *Context) NewHostPool(size, n int) (*HostPool, error) {
	p := &HostPool{ctx: c, size: size, free: make(chan []byte, n)}
	for range n {
		b, err := c.AllocHost(size)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("host pool of %d x %d bytes: %w", n, size, err)
		}
		p.all = append(p.all, b)
		p.free <- b
	}
	return p, nil
}

// Size returns the bytes of each buffer.
func (p *HostPool) Size() int { return p.size }

// Get returns a free buffer, waiting for one if none is.
func (p *HostPool) Get() []byte { return <-p.free }

// Put returns a buffer from Get to the pool.
func (p *HostPool) Put(b []byte) { p.free <- b[:p.size] }

// Close frees every buffer; none may be in use.
func (p *HostPool) Close() error {
	var first error
	p.once.Do(func() {
		for _, b := range p.all {
			if err := p.ctx.FreeHost(b); err != nil && first == nil {
				first = err
			}
		}
		p.all = nil
	})
	return first
}
