package scan

import (
	"bytes"
	"sync"
)

// bytesBuffer is a bytes.Buffer safe for the goroutines of a scan.
type bytesBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *bytesBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *bytesBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
