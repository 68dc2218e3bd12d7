// Package integration holds tests and no code. They run the middleware with
// each real store at once, over real HTTP, under concurrency, outages and
// load.
//
// They stand apart because their subject is no single package. The
// concurrency test runs one set of duplicates against memstore, sqlitestore,
// redisstore and pgstore in turn and counts handler executions. The Redis
// test kills and restarts a private redis-server under traffic to measure
// the breaker. The load runs (behind -load) compare the middleware with a
// bare handler. Put in package idemhook's tests, they would make its test
// run start servers and import every store. Put in one store's tests, they
// would leave the others out.
package integration
