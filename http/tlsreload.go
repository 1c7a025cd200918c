package http

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certCheckInterval is how often, at most, a handshake looks at the
// certificate files' modification times.
const certCheckInterval = time.Second

// certReloader serves the certificate in a pair of PEM files and loads it
// again when either file changes (its modification time or size), so a
// renewed certificate (certbot, cert-manager, a secret mount) takes effect
// on the next handshake without a restart. A pair that fails to load (a
// half-written renewal, a key that does not match) keeps the previous
// certificate in service and is logged; it is retried on the next check.
type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger
	now               func() time.Time

	mu        sync.Mutex
	cert      *tls.Certificate
	stamp     string // modification times and sizes of the loaded pair
	checkedAt time.Time
}

// newCertReloader loads the pair once; a pair that does not load is an
// error at start, naming the files.
func newCertReloader(certFile, keyFile string, logger *slog.Logger) (*certReloader, error) {
	c := &certReloader{certFile: certFile, keyFile: keyFile, logger: logger, now: time.Now}
	stamp, err := c.stampFiles()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	c.cert, c.stamp, c.checkedAt = &cert, stamp, c.now()
	return c, nil
}

func (c *certReloader) stampFiles() (string, error) {
	var stamp string
	for _, f := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("TLS file: %w", err)
		}
		stamp += fmt.Sprintf("%d/%d;", fi.ModTime().UnixNano(), fi.Size())
	}
	return stamp, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (c *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); now.Sub(c.checkedAt) >= certCheckInterval {
		c.checkedAt = now
		c.reload()
	}
	return c.cert, nil
}

// reload loads the pair again if the files changed; c.mu is held.
func (c *certReloader) reload() {
	stamp, err := c.stampFiles()
	if err != nil {
		c.logger.Error("TLS certificate files unreadable; still serving the loaded certificate", "cert", c.certFile, "key", c.keyFile, "err", err)
		return
	}
	if stamp == c.stamp {
		return
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		c.logger.Error("TLS certificate changed but does not load; still serving the previous one", "cert", c.certFile, "key", c.keyFile, "err", err)
		return
	}
	c.cert, c.stamp = &cert, stamp
	c.logger.Info("TLS certificate reloaded", "cert", c.certFile)
}

// tlsConfig is the listeners' TLS configuration: TLS 1.2 at least, the
// certificate from the reloader.
func (c *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: c.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
}
