// Command helm-engine runs Helm's own command line, linked in, for one caller over its standard
// input and output: each request is a helm command line with its environment, each reply what
// the same `helm` process would have printed and its exit code.
//
// A `helm` process spends most of a short call starting: loading a 60 MB binary, initialising
// client-go's type registry, building a client and its TLS connection. Here that happens once per
// engine, and TLS connections to an API server are kept between calls. Everything else is Helm's
// own code on Helm's own path, exactly as the CLI runs it: flags, storage, hooks, post-renderer
// plugins, server-side apply.
//
// The one difference: a template's `lookup` sees only the release's own objects (lookup.go).
//
// Calls run one at a time. Helm's CLI keeps its settings in package variables that it reads from
// the environment once, so each call sets the environment it was given and starts from fresh
// settings, as Helm's own command tests do.
//
// Protocol: one JSON object per line each way.
//
//	request: {"args": ["upgrade", "--install", ...], "env": {"KUBECONFIG": "...", ...}}
//	reply:   {"code": 0, "stdout": "...", "stderr": "...", "retained": 41943040}
//
// The engine exits when its standard input closes, and ends as Go's runtime does when memory
// runs out once a call holds more live heap than HELM_ENGINE_CALL_HEAP bytes (memory.go).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"

	"helm.sh/helm/v4/pkg/cli"
	helmcmd "helm.sh/helm/v4/pkg/cmd"
	"helm.sh/helm/v4/pkg/kube"
)

// request is one helm command line and the whole environment it runs with.
type request struct {
	Args []string          `json:"args"`
	Env  map[string]string `json:"env"`
}

// reply is what a helm process would have left: its output and its exit code; and, after a
// call that grew the heap, what the engine still holds (memory.go).
type reply struct {
	Code     int    `json:"code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	Retained uint64 `json:"retained,omitempty"`
}

// The largest request line: a command line and an environment are a few KiB; values and
// kubeconfigs travel as files.
const maxRequest = 1 << 20

func main() {
	// As the helm binary names itself in managed fields, whatever its file is called.
	kube.ManagedFieldsManager = "helm"

	// Replies go to the real standard output; anything Helm prints there by itself goes to
	// standard error instead, so that it cannot break a reply.
	replies := json.NewEncoder(os.Stdout)
	os.Stdout = os.Stderr
	go watchHeap(callHeapLimit())

	requests := bufio.NewScanner(os.Stdin)
	requests.Buffer(make([]byte, 64<<10), maxRequest)
	for requests.Scan() {
		var call request
		answer := reply{Code: 1}
		if err := json.Unmarshal(requests.Bytes(), &call); err != nil {
			answer.Stderr = fmt.Sprintf("Error: the engine cannot read the request: %v\n", err)
		} else {
			inCall.Store(true)
			answer = run(call)
			inCall.Store(false)
			answer.Retained = giveBackHeap()
		}
		if err := replies.Encode(answer); err != nil {
			fmt.Fprintf(os.Stderr, "helm-engine: cannot reply: %v\n", err)
			os.Exit(1)
		}
	}
	if err := requests.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "helm-engine: cannot read requests: %v\n", err)
		os.Exit(1)
	}
}

// run runs one helm command line as the helm binary's main does, with its output captured.
func run(call request) (answer reply) {
	var stdout, stderr bytes.Buffer
	defer func() {
		// A panic in a helm process ends that process with code 2; here it ends the call.
		if recovered := recover(); recovered != nil {
			fmt.Fprintf(&stderr, "panic: %v\n\n%s", recovered, debug.Stack())
			answer = reply{Code: 2, Stdout: stdout.String(), Stderr: stderr.String()}
		}
	}()

	os.Clearenv()
	for name, value := range call.Env {
		os.Setenv(name, value)
	}
	settings = cli.New()
	cobraInitializers = nil

	logToCall := func(debug bool) {
		slog.SetDefault(slog.New(logHandler(&stderr, debug)))
	}
	code := 0
	cmd, err := newRootCmd(&stdout, call.Args, logToCall)
	if err == nil {
		cmd.SetArgs(call.Args)
		cmd.SetOut(&stdout)
		cmd.SetErr(&stderr)
		err = cmd.Execute()
	}
	if err != nil {
		code = 1
		if commandErr, ok := errors.AsType[helmcmd.CommandError](err); ok {
			code = commandErr.ExitCode
		}
		if cmd == nil {
			fmt.Fprintf(&stderr, "level=WARN msg=\"command failed\" error=%q\n", err)
		}
	}
	return reply{Code: code, Stdout: stdout.String(), Stderr: stderr.String()}
}

// logHandler logs as Helm's CLI does (text, no time, debug only with --debug), to w.
func logHandler(w io.Writer, debug bool) slog.Handler {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	return slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(_ []string, attr slog.Attr) slog.Attr {
			if attr.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return attr
		},
	})
}
