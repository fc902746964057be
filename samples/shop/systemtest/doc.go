// Package systemtest holds the shop's system tests: the shop served
// over HTTP, gRPC and the command line on 127.0.0.1, run in-process
// through shopcmd or as a process of its own. The test binary stands in
// for the shop binary when SHOP_TEST_RUN_MAIN is set.
package systemtest
