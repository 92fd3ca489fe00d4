package scenario_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/h3edge/h3edge/bench/scenario"
)

func ExampleClaim() {
	for _, name := range scenario.Names() {
		claim, err := scenario.Claim(name)
		fmt.Println(name, claim != "" && err == nil)
	}
	_, err := scenario.Claim("no-such-scenario")
	fmt.Println(errors.Is(err, scenario.ErrUnknown))
	// Output:
	// baseline true
	// noisy-neighbour true
	// boundary true
	// fields true
	// accuracy true
	// outage true
	// drop-cost true
	// proxy true
	// true
}

func ExampleRun() {
	// A name no scenario has is an error.
	_, err := scenario.Run(context.Background(), "no-such-scenario", scenario.Options{Short: true})
	fmt.Println(errors.Is(err, scenario.ErrUnknown))
	// Output: true
}

func ExampleProcessCPU() {
	used, err := scenario.ProcessCPU(os.Getpid())
	fmt.Println(err == nil && used >= 0)
	// Output: true
}
