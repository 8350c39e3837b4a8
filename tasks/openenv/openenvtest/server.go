// Package openenvtest is an OpenEnv-style environment server for tests:
// the wire form of OpenEnv's HTTPEnvServer (see package openenv's doc)
// over a real HTTP server, one environment per server, like theirs.
//
// The environment is an echo game in the shape of OpenEnv's echo_env
// (EchoAction{message} → EchoObservation{echoed_message, message_length},
// src/envs/echo_env at meta-pytorch/OpenEnv@964e95c87b91c30eede9473e501d86a84f48c39a):
// reset shows {"echoed_message": "Say a number.", "message_length": 0};
// a step with {"message": text} echoes it with reward 1 when the text
// holds a digit, 0 otherwise, and ends the episode at the second step; a
// step with a ToolCallAction {"tool_name": "add", "parameters": {"a", "b"}}
// answers {"echoed_message": "<a+b>"} with reward 0.
//
// Faults for failure tests: Fail makes /step answer 500 with FastAPI's
// {"detail"}; Hang makes /step block until the request is cancelled; Kill
// closes the listener and every connection (a dead server: connection
// refused) and Revive serves again on the same address.
package openenvtest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
)

// Server is one OpenEnv-style environment server.
type Server struct {
	*httptest.Server
	Fail, Hang atomic.Bool
	// Resets and Steps count the calls.
	Resets, Steps atomic.Int64

	mu    sync.Mutex
	step  int
	epoch int
	stop  chan struct{}
	once  sync.Once
}

// Kill drops the server: its connections are closed, new ones refused.
func (s *Server) Kill() {
	s.Server.CloseClientConnections()
	_ = s.Server.Listener.Close()
}

// Revive serves again on the address Kill closed.
func (s *Server) Revive() error {
	ln, err := net.Listen("tcp", s.Server.Listener.Addr().String())
	if err != nil {
		return err
	}
	go func() { _ = s.Server.Config.Serve(ln) }()
	s.Server.Listener = ln
	return nil
}

// Close releases hung requests and stops the server.
func (s *Server) Close() {
	s.once.Do(func() { close(s.stop) })
	s.Server.Close()
}

// New starts a server; Close it when done.
func New() *Server {
	s := &Server{stop: make(chan struct{})}
	s.Server = httptest.NewServer(s.mux())
	return s
}

// NewAt is New listening on addr (host:port): a test that killed a
// server's process starts its successor on the same address.
func NewAt(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("openenvtest: listen %s: %w", addr, err)
	}
	s := &Server{stop: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(s.mux())
	_ = s.Server.Listener.Close()
	s.Server.Listener = ln
	s.Server.Start()
	return s, nil
}

func (s *Server) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /reset", s.reset)
	mux.HandleFunc("POST /step", s.stepHandler)
	mux.HandleFunc("GET /state", s.state)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		write(w, 200, map[string]any{"status": "healthy"})
	})
	return mux
}

func write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	s.Resets.Add(1)
	s.mu.Lock()
	s.step, s.epoch = 0, s.epoch+1
	s.mu.Unlock()
	write(w, 200, map[string]any{"observation": map[string]any{"echoed_message": "Say a number.", "message_length": 0}, "reward": 0.0, "done": false})
}

func (s *Server) stepHandler(w http.ResponseWriter, r *http.Request) {
	s.Steps.Add(1)
	var req struct {
		Action map[string]any `json:"action"`
	}
	err := json.NewDecoder(r.Body).Decode(&req) // read first: then a closed connection cancels r's context
	if s.Hang.Load() {
		select {
		case <-r.Context().Done():
		case <-s.stop:
		}
		return
	}
	if s.Fail.Load() {
		write(w, 500, map[string]any{"detail": "Environment error: simulated crash"})
		return
	}
	if err != nil || req.Action == nil {
		write(w, 400, map[string]any{"detail": "Missing required field: 'action'"})
		return
	}
	if name, ok := req.Action["tool_name"].(string); ok {
		p, _ := req.Action["parameters"].(map[string]any)
		a, _ := p["a"].(float64)
		b, _ := p["b"].(float64)
		if name != "add" {
			write(w, 400, map[string]any{"detail": "unknown tool " + name})
			return
		}
		write(w, 200, map[string]any{"observation": map[string]any{"echoed_message": fmt.Sprint(a + b)}, "reward": nil, "done": false})
		return
	}
	msg, _ := req.Action["message"].(string)
	s.mu.Lock()
	s.step++
	done := s.step >= 2
	s.mu.Unlock()
	reward := 0.0
	if strings.ContainsAny(msg, "0123456789") {
		reward = 1
	}
	write(w, 200, map[string]any{"observation": map[string]any{"echoed_message": msg, "message_length": len(msg)}, "reward": reward, "done": done})
}

func (s *Server) state(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	write(w, 200, map[string]any{"episode_id": fmt.Sprintf("ep-%d", s.epoch), "step_count": s.step})
}
