/**
 * The test support module: every test imports its helpers from here (`../support/index.js`). The
 * MCP servers tests run against are fixtures, in test/fixtures; what helps a test drive and observe
 * the store is here, one concern a file:
 *
 *   server.ts      a store in the test's process (startTestServer), monitoring settings, free ports, keys (createKey)
 *   per-user.ts    a store with keys whose agent has one `per_user` service, its principals' credentials given (startPerUserStore)
 *   stores.ts      the hooks of a file that starts stores and the HTTP fixture (useTestServers)
 *   conformance.ts the MCP conformance suite run against a URL: one server scenario, or all of them
 *   client.ts      JSON and raw HTTP clients, a request left open, add_service / wait_service, a principal's credential
 *   typed.ts       the typed client of the contract (HttpApiClient), as `TestServer.typed` or `connectTyped`
 *   wait.ts        eventually, within, flush, quietFor (the one deliberate pause), sampleEvery, together (set-up steps at once)
 *   process.ts     /proc checks (processGone, groupRunning, liveGroupMembers, ...), a store process
 *   package.ts     the npm package packed and installed offline (packAndInstall), dist/ built
 *   lifecycle.ts   the allowed status changes, a recorder of a service actor's statuses
 *   mcp.ts         fixture definitions, tool result text, the failure of an MCP request
 *   modern-request.ts one MCP 2026-07-28 request over raw HTTP (envelope and headers), its answer
 *   oauth-client.ts an OAuth client's site (metadata documents, callback) and SDK v2's provider in memory; a browser of a user at the OAuth fixture
 *   sse.ts         a Server-Sent Events reader (/events, /inspect/events)
 *   prometheus.ts  GET /metrics parsed into samples
 *   records.ts     tool-call records as ToolRecords.record takes them (newRecord)
 *   routes.ts      the route table with the JSON Schemas of every endpoint's inputs
 *   machines.ts    fake side-effect actors and a service actor on a simulated clock
 *   chromium.ts    headless Chromium for the browser tests
 *   requirements.ts redis-server and Chromium: installed, required by the run (MCPSTORE_TEST_REQUIRE)
 *   redis.ts       a real redis-server on a free loopback port (startRedisServer), a proxy to cut it off or slow it
 *   replica-stand-ins.ts another replica's forwarding route as a plain HTTP server, a host that does not answer (blackHole), a recording proxy in front of a replica, a forwarder to a plain server (forwarderTo)
 *   programs.ts    the store, the stdio fixtures and the third-party MCP programs as esbuild bundles, for child processes
 */
export * from "./chromium.js"
export * from "./client.js"
export * from "./conformance.js"
export * from "./lifecycle.js"
export * from "./machines.js"
export * from "./mcp.js"
export * from "./modern-request.js"
export * from "./oauth-client.js"
export * from "./package.js"
export * from "./process.js"
export * from "./prometheus.js"
export * from "./records.js"
export * from "./routes.js"
export * from "./per-user.js"
export * from "./server.js"
export * from "./stores.js"
export * from "./sse.js"
export * from "./wait.js"
export * from "./redis.js"
export * from "./replica-stand-ins.js"
export * from "./requirements.js"
export * from "./programs.js"
export type { ApiClient, TypedApi } from "./typed.js"

/** The typed client of a store's URL (a store process, a replica), loaded on first use. */
export const connectTyped = async (baseUrl: string, apiKey?: string): Promise<import("./typed.js").TypedApi> =>
  (await import("./typed.js")).typedApi(baseUrl, apiKey)
