package zmq

import (
	"context"
	"log/slog"
	"sync"

	"github.com/go-zeromq/zmq4"
)

// lifecycle starts a worker's receive loop and stops it once: the part the
// REP, PULL and ROUTER workers share.
type lifecycle struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// start runs run in the background; cancel ends its context.
func (l *lifecycle) start(cancel context.CancelFunc, run func()) {
	l.cancel, l.done = cancel, make(chan struct{})
	go func() {
		defer close(l.done)
		run()
	}()
}

// stop cancels the loop, closes the sockets (which unblocks its Recv), and
// waits for the loop and the work in progress. Later calls do nothing.
func (l *lifecycle) stop(closeSockets func() error) error {
	var err error
	l.once.Do(func() {
		if l.cancel == nil {
			return
		}
		l.cancel()
		err = closeSockets()
		<-l.done
	})
	return err
}

// receiveLoop receives from sock until ctx ends and hands each message to
// handle, at most concurrency at a time, and waits for them before it
// returns. A receive error (a peer went away) is logged and skipped: the
// other peers, and its successor, go on.
func receiveLoop(ctx context.Context, sock zmq4.Socket, name string, concurrency int, logger *slog.Logger, handle func(context.Context, zmq4.Msg)) {
	var inflight sync.WaitGroup
	defer inflight.Wait()
	slots := make(chan struct{}, cmpOrInt(concurrency, 1))
	for {
		msg, err := sock.Recv()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			logger.Debug("zmq: "+name+" receive", "err", err)
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-slots }()
			handle(ctx, msg)
		}()
	}
}
