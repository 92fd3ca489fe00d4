package chart_test

import (
	"fmt"
	"strings"

	"github.com/h3edge/h3edge/bench/chart"
)

func ExampleChart_WriteSVG() {
	c := chart.Chart{
		Title:  "admitted per 100 ms",
		Series: []chart.Series{{Name: "fixed_window", X: []float64{0, 0.1, 0.2}, Y: []float64{20, 0, 0}, Step: true}},
		VLines: []chart.Marker{{At: 0.15, Label: "boundary"}},
	}
	var b strings.Builder
	if err := c.WriteSVG(&b); err != nil {
		panic(err)
	}
	fmt.Println(strings.SplitN(b.String(), "\n", 3)[1][:40])
	// Output: <svg xmlns="http://www.w3.org/2000/svg"
}
