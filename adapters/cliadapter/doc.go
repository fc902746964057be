// Package cliadapter serves Sundial operations as cobra commands and maps
// outcomes to process exit codes.
package cliadapter
