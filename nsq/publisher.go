package nsq

import (
	"errors"
	"fmt"
	"log/slog"

	gonsq "github.com/nsqio/go-nsq"
)

// Publisher publishes messages to one of several nsqd, trying them in order:
// a publish succeeds once one nsqd acknowledged it (a publish that fails
// after nsqd received it may be repeated on the next one, which is harmless
// for billing events, whose key is their content).
type Publisher struct {
	producers []*gonsq.Producer
}

// NewPublisher returns a Publisher to the nsqd TCP addresses; cfg may be
// nil for go-nsq's defaults and logger nil to discard. It connects lazily,
// on the first publish; Ping checks the connections up front.
func NewPublisher(addrs []string, cfg *gonsq.Config, logger *slog.Logger) (*Publisher, error) {
	if len(addrs) == 0 {
		return nil, errors.New("nsq publisher: no nsqd address")
	}
	if cfg == nil {
		cfg = gonsq.NewConfig()
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Publisher{}
	for _, addr := range addrs {
		prod, err := gonsq.NewProducer(addr, cfg)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("nsq publisher %s: %w", addr, err)
		}
		setProducerLogger(prod, logger.With("component", "go-nsq"))
		p.producers = append(p.producers, prod)
	}
	return p, nil
}

// Ping connects to every nsqd and returns the first failure.
func (p *Publisher) Ping() error {
	for _, prod := range p.producers {
		if err := prod.Ping(); err != nil {
			return fmt.Errorf("nsqd %s: %w", prod.String(), err)
		}
	}
	return nil
}

// Publish publishes body to topic. It returns nil once an nsqd has it, and
// the error of every nsqd otherwise.
func (p *Publisher) Publish(topic string, body []byte) error {
	return p.try(func(prod *gonsq.Producer) error { return prod.Publish(topic, body) })
}

// MultiPublish publishes bodies to topic atomically (MPUB): an nsqd takes
// all of them or none. Returns as Publish.
func (p *Publisher) MultiPublish(topic string, bodies [][]byte) error {
	if len(bodies) == 0 {
		return nil
	}
	return p.try(func(prod *gonsq.Producer) error { return prod.MultiPublish(topic, bodies) })
}

func (p *Publisher) try(fn func(*gonsq.Producer) error) error {
	var errs []error
	for _, prod := range p.producers {
		err := fn(prod)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("nsqd %s: %w", prod.String(), err))
	}
	return fmt.Errorf("nsq publish: %w", errors.Join(errs...))
}

// Close stops the producers, waiting for their pending publishes.
func (p *Publisher) Close() error {
	for _, prod := range p.producers {
		prod.Stop()
	}
	return nil
}
