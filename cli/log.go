package cli

import (
	"fmt"
	"h5ingest/scan"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
)

// newLogger returns the command's logger: readable lines on a terminal,
// JSON otherwise, on standard error. Repeated messages are sampled, so a
// stream of bad frames cannot flood the log.
func newLogger(level string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, scan.Usage(fmt.Errorf("--log-level %q: want debug, info, warn or error", level))
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.OutputPaths = []string{"stderr"}
	cfg.ErrorOutputPaths = []string{"stderr"}
	cfg.Sampling = &zap.SamplingConfig{Initial: 10, Thereafter: 1000}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		cfg.Encoding = "console"
		cfg.EncoderConfig = zap.NewDevelopmentEncoderConfig()
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	}
	return cfg.Build()
}
