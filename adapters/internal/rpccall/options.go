package rpccall

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/sundial-go/sundial/pipeline"
)

// Defaults returns the Config of an adapter of protocol p given no
// options.
func Defaults(p pipeline.Protocol) Config {
	return Config{Domain: DefaultDomain, Tolerance: DefaultTolerance,
		BaggageLimit: DefaultBaggageLimit, Protocol: p}
}

// The setters below are the adapters' shared options. Each keeps what it
// is given no usable value for, as the options promise.

// SetLogger sets Logger; nil keeps it.
func (c *Config) SetLogger(l *slog.Logger) {
	if l != nil {
		c.Logger = l
	}
}

// SetDomain sets Domain; "" keeps it.
func (c *Config) SetDomain(domain string) {
	if domain != "" {
		c.Domain = domain
	}
}

// SetTolerance sets Tolerance; 0 turns it off, and a negative d keeps it.
func (c *Config) SetTolerance(d time.Duration) {
	if d >= 0 {
		c.Tolerance = d
	}
}

// SetBaggageLimit sets BaggageLimit; n <= 0 keeps it.
func (c *Config) SetBaggageLimit(n int) {
	if n > 0 {
		c.BaggageLimit = n
	}
}

// SetPropagator makes p extract the trace context; nil extracts none.
// The baggage is extracted whatever p is.
func (c *Config) SetPropagator(p propagation.TextMapPropagator) {
	c.Propagator, c.OwnPropagator = p, true
}
