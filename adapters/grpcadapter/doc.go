// Package grpcadapter serves Sundial operations as gRPC methods on a
// *grpc.Server and maps outcomes to gRPC statuses.
package grpcadapter
