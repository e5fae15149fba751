package scan

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// descriptorWatch notes whether the process ran out of file descriptors
// while it waited for a sender: a receiver's provider that cannot take a
// connection for want of one drops it unseen, and the wait would
// otherwise end as a plain timeout although the detector tried.
type descriptorWatch struct {
	out     atomic.Bool
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
}

// descriptorPoll is how often the watch tries to open a descriptor.
const descriptorPoll = 200 * time.Millisecond

// watchDescriptors starts a watch; end it with Stop.
func watchDescriptors() *descriptorWatch {
	w := &descriptorWatch{stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		t := time.NewTicker(descriptorPoll)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				if outOfDescriptors() {
					w.out.Store(true)
				}
			}
		}
	}()
	return w
}

// Stop ends the watch, if it has not ended, and reports whether the
// process ran out of descriptors meanwhile.
func (w *descriptorWatch) Stop() bool {
	w.stopped.Do(func() { close(w.stop) })
	w.wg.Wait()
	return w.out.Load()
}

// outOfDescriptors reports whether the process can open no descriptor
// now (EMFILE, or ENFILE for the whole system).
func outOfDescriptors() bool {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err == nil {
		syscall.Close(fd)
		return false
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
