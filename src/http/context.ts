/**
 * What the HTTP handlers share: the store and how the server was started. Provided once by the
 * server layer (src/http/server.ts); handlers read it, they never create or stop anything.
 */
import { Context } from "effect"
import type { ServerOptions, StoreOptions } from "../config/options.js"
import type { Metrics } from "../monitoring/metrics.js"
import type { Store } from "../runtime/store.js"

export interface AppState {
  readonly store: Store
  readonly server: ServerOptions
  readonly storeOptions: StoreOptions
  /** True once shutdown has begun (application health answers 503). */
  shuttingDown: boolean
  /** Aborted when shutdown begins: open event streams end. */
  readonly closing: AbortController
  /** The port the server listens on (differs from `server.port` when that is 0). */
  port: number
  /** Prometheus metrics, set up with the extra routes. */
  metrics?: Metrics
}

export class App extends Context.Tag("mcp-store/App")<App, AppState>() {}
