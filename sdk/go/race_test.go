//go:build race

package sonde

const raceEnabled = true
