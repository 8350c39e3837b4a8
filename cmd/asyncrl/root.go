package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/buildinfo"
	"github.com/asyncrl/asyncrl/internal/logx"
)

// Exit codes (see doc.go).
const (
	exitOK    = 0
	exitError = 1
)

// exitErr carries a message for stderr and the process exit code out of a
// command, so commands return errors instead of calling os.Exit.
type exitErr struct {
	code int
	msg  string
}

func (e *exitErr) Error() string { return e.msg }

// fail makes an exit-1 error whose message is printed as is.
func fail(format string, args ...any) error {
	return &exitErr{code: exitError, msg: fmt.Sprintf(format, args...)}
}

// globals holds the root's persistent flags and output streams.
type globals struct {
	logLevel  string
	logFormat string
	stdout    io.Writer
	stderr    io.Writer
}

// logger builds the process logger: the config's log section, overridden
// by --log-level/--log-format when given on the command line.
func (g *globals) logger(cmd *cobra.Command, fromConfig config.LogConfig) (zerolog.Logger, error) {
	level, format := string(fromConfig.Level), string(fromConfig.Format)
	if cmd.Flags().Changed("log-level") || level == "" {
		level = g.logLevel
	}
	if cmd.Flags().Changed("log-format") || format == "" {
		format = g.logFormat
	}
	return logx.New(logx.Options{Level: level, Format: format, Out: g.stderr})
}

// newRootCmd builds the asyncrl command tree writing to stdout and stderr.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "asyncrl",
		Short: "Control plane for fully asynchronous RL post-training of LLMs",
		Long: "asyncrl runs fully asynchronous RL post-training: rollout actors, a session-aware\n" +
			"router, inference engines, a dynamic-sampling filter, a trainer and a weight\n" +
			"publisher, on one machine or across nodes over NATS.",
		Version: buildinfo.Version,
		// Errors are printed once, by execute, in each command's own words.
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := logx.ParseLevel(g.logLevel); err != nil {
				return fail("asyncrl: --log-level: %v", err)
			}
			if _, err := logx.ParseFormat(g.logFormat); err != nil {
				return fail("asyncrl: --log-format: %v", err)
			}
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate(versionLine() + "\n")
	pf := root.PersistentFlags()
	pf.StringVar(&g.logLevel, "log-level", "info", "minimum log level: debug, info, warn or error")
	pf.StringVar(&g.logFormat, "log-format", "auto", "log format: auto (console on a terminal, JSON otherwise), json or console")

	root.AddCommand(
		newRunCmd(g),
		newSFTCmd(g),
		newNodeCmd(g),
		newStatusCmd(g),
		newRouterCmd(g),
		newEngineCmd(g),
		newEngineGuardCmd(g),
		newEnginesCmd(g),
		newEnvCmd(g),
		newWorkerCmd(g),
		newWeightsCmd(g),
		newModelCmd(g),
		newSimCmd(g),
		newChaosCmd(g),
		newBenchCmd(g),
		newConfigCmd(g),
		newSecurityCmd(g),
		newDataCmd(g),
		newVersionCmd(g),
		newTinkerCmd(g),
		newTokenizerCmd(g),
	)
	return root
}

// execute runs the command tree on args and returns the exit code.
func execute(args []string, stdout, stderr io.Writer) int {
	return executeContext(context.Background(), args, stdout, stderr)
}

// executeContext is execute with a context: long-running commands (servers)
// stop when ctx ends, as they do on SIGINT/SIGTERM.
func executeContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitErr
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, ee.msg)
		}
		return ee.code
	}
	// cobra's own errors (unknown command or flag, wrong argument count),
	// printed as cobra would.
	fmt.Fprintf(stderr, "Error: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
	return exitError
}

// loadConfig returns the run configuration: Default() when path is empty,
// else the file; override (flags) is applied before validation.
func loadConfig(path string, override func(*config.Config)) (config.Config, error) {
	if path == "" {
		c := config.Default()
		if override != nil {
			override(&c)
		}
		if err := c.Validate(); err != nil {
			return config.Config{}, err
		}
		return c, nil
	}
	return config.LoadWith(path, override)
}
