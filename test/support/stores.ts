/**
 * The set-up most integration files share, as one call: `useTestServers()` registers the hooks that
 * start the Streamable HTTP fixture once for the file (`httpFixture: true`), and end after each test
 * every store it started (`start`) and every resource handed to `defer` (streams, clients), so a file
 * keeps only what is its own.
 */
import { afterAll, afterEach, beforeAll } from "vitest"
import type { HttpFixture } from "../fixtures/http-fixture.js"
import { startTestServer, type TestServer, type TestServerOptions } from "./server.js"

export interface TestServers {
  /** The file's Streamable HTTP fixture (with `httpFixture: true`), started before the first test. */
  readonly fixture: HttpFixture
  /** The store the test started last (throws when it started none). */
  readonly server: TestServer
  /** Starts a store, cleaned up after the test. */
  start(options?: TestServerOptions): Promise<TestServer>
  /** Runs `release` after the test, before the stores close (newest first; failures ignored). */
  defer(release: () => unknown): void
}

/** Registers the hooks of a file that starts stores (and the HTTP fixture); call at the top of the file. */
export const useTestServers = (options: { readonly httpFixture?: boolean } = {}): TestServers => {
  let fixture: HttpFixture | undefined
  const servers: TestServer[] = []
  const releases: Array<() => unknown> = []
  if (options.httpFixture === true) {
    beforeAll(async () => {
      // Loaded here: a file without the fixture does not load the MCP server code.
      const { startHttpFixture } = await import("../fixtures/http-fixture.js")
      fixture = await startHttpFixture()
    })
    afterAll(async () => {
      await fixture?.stop()
    })
  }
  afterEach(async () => {
    for (const release of releases.splice(0).reverse()) {
      try {
        await release()
      } catch {
        // a resource the test already ended
      }
    }
    await Promise.all(servers.splice(0).map((s) => s.cleanup()))
  })
  return {
    get fixture() {
      if (fixture === undefined) throw new Error("useTestServers: no HTTP fixture (httpFixture: true), or used before beforeAll")
      return fixture
    },
    get server() {
      const last = servers[servers.length - 1]
      if (last === undefined) throw new Error("useTestServers: no store started in this test")
      return last
    },
    start: async (serverOptions = {}) => {
      const server = await startTestServer(serverOptions)
      servers.push(server)
      return server
    },
    defer: (release) => void releases.push(release)
  }
}
