package every_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/keybrake/keybrake/internal/every"
)

func TestStart(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		calls := make(chan struct{}, 10)
		stop := every.Start(time.Millisecond, func() { calls <- struct{}{} })
		for range 3 {
			select {
			case <-calls:
			case <-time.After(10 * time.Second):
				t.Fatal("fn was not called again")
			}
		}
		stop()
	})
	t.Run("OKNoCallAfterStop", func(t *testing.T) {
		var running, after atomic.Int32
		var stopped atomic.Bool
		stop := every.Start(time.Microsecond, func() {
			if running.Add(1) > 1 {
				t.Error("calls overlap")
			}
			if stopped.Load() {
				after.Add(1)
			}
			time.Sleep(50 * time.Microsecond) // holds the call open across stop; not synchronisation
			running.Add(-1)
		})
		deadline := time.Now().Add(10 * time.Second)
		for running.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Microsecond)
		}
		stop()
		stopped.Store(true)
		if running.Load() != 0 {
			t.Fatal("stop returned while fn was running")
		}
		time.Sleep(5 * time.Millisecond) // a timer that would still fire has had time to
		if n := after.Load(); n != 0 {
			t.Fatalf("fn ran %d times after stop", n)
		}
	})
	t.Run("OKStopBeforeFirst", func(t *testing.T) {
		var n atomic.Int32
		every.Start(time.Hour, func() { n.Add(1) })()
		if n.Load() != 0 {
			t.Fatal("fn ran")
		}
	})
}
