package main

import (
	"context"
	"fmt"
)

func runBench(ctx context.Context, args []string, env Env) error {
	fs := flagSet("bench", "Measures the simulator directly and through the proxy in the same run and prints ratios.", env)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return fmt.Errorf("bench: not implemented yet")
}
