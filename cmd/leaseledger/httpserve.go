package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTP listeners of serve's and collect's --metrics-addr.

const (
	// httpReadHeaderTimeout bounds a request's headers on those listeners.
	httpReadHeaderTimeout = 5 * time.Second
	// httpShutdownTimeout bounds the graceful stop of one listener.
	httpShutdownTimeout = 5 * time.Second
)

// metricsHandler serves the Prometheus metrics of cs together with the Go
// runtime's and the process's.
func metricsHandler(cs ...prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))...)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// serveHTTP serves h on addr until stop is called; bound is the address
// it listens on (addr's port 0 resolved). what names the listener in the
// error.
func serveHTTP(what, addr string, h http.Handler) (stop func(), bound string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", what, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: httpReadHeaderTimeout}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, ln.Addr().String(), nil
}
