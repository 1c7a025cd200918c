package nsq

import (
	"context"
	"log/slog"
	"strings"

	gonsq "github.com/nsqio/go-nsq"
)

// nsqLogger adapts slog to go-nsq's logger, one adapter per level.
type nsqLogger struct {
	l     *slog.Logger
	level slog.Level
}

// Output implements go-nsq's logger interface.
func (n nsqLogger) Output(_ int, s string) error {
	// go-nsq prefixes lines with its own level tag ("INF    1 [topic/channel] …").
	if len(s) > 4 && s[3] == ' ' {
		s = strings.TrimLeft(s[4:], " ")
	}
	n.l.Log(context.Background(), n.level, s)
	return nil
}

var nsqLevels = []struct {
	nsq  gonsq.LogLevel
	slog slog.Level
}{
	{gonsq.LogLevelDebug, slog.LevelDebug},
	{gonsq.LogLevelInfo, slog.LevelInfo},
	{gonsq.LogLevelWarning, slog.LevelWarn},
	{gonsq.LogLevelError, slog.LevelError},
}

// setConsumerLogger routes the consumer's log lines to l at their level.
func setConsumerLogger(c *gonsq.Consumer, l *slog.Logger) {
	for _, lv := range nsqLevels {
		c.SetLoggerForLevel(nsqLogger{l, lv.slog}, lv.nsq)
	}
	c.SetLoggerLevel(minLevel(l))
}

// setProducerLogger routes the producer's log lines to l at their level.
func setProducerLogger(p *gonsq.Producer, l *slog.Logger) {
	for _, lv := range nsqLevels {
		p.SetLoggerForLevel(nsqLogger{l, lv.slog}, lv.nsq)
	}
	p.SetLoggerLevel(minLevel(l))
}

// minLevel is the lowest go-nsq level l would print, so go-nsq does not
// format lines that slog drops.
func minLevel(l *slog.Logger) gonsq.LogLevel {
	for _, lv := range nsqLevels {
		if l.Enabled(context.Background(), lv.slog) {
			return lv.nsq
		}
	}
	return gonsq.LogLevelMax
}
