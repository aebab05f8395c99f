package livepage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server serves a Page over HTTP.
type Server struct {
	srv    *http.Server
	ln     net.Listener
	stop   context.CancelFunc
	served chan struct{}
}

// Start listens on addr (host:port; port 0 picks one) and serves p's
// Handler there until Close. A bad or busy address is an error at once.
func Start(addr string, p *Page, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("live page: listen on %q: %w (give host:port, e.g. 127.0.0.1:8080)", addr, err)
	}
	// Event streams end when the server closes: they run under base.
	base, stop := context.WithCancel(context.Background())
	s := &Server{
		srv: &http.Server{
			Handler:           Handler(p),
			ReadHeaderTimeout: 10 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return base },
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		ln: ln, stop: stop, served: make(chan struct{}),
	}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("live page stopped serving", "err", err)
		}
	}()
	return s, nil
}

// URL is where the page is served.
func (s *Server) URL() string {
	return "http://" + s.ln.Addr().String() + "/"
}

// Close ends open event streams, waits up to five seconds for requests to
// finish, and stops the server.
func (s *Server) Close() error {
	s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.served
	return err
}
