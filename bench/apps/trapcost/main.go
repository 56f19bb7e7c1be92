// trapcost calls probeMe (trapcost_amd64.s) N times and prints the mean
// nanoseconds per call: with a uprobe on one of its instructions, the cost
// of that probe's hit, less the bare call's.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

func probeMe()

func main() {
	n, err := strconv.Atoi(os.Args[1])
	if err != nil {
		panic(err)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		probeMe()
	}
	fmt.Printf("%.1f\n", float64(time.Since(start).Nanoseconds())/float64(n))
}
