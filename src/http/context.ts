/**
 * What the HTTP handlers share: the store, its metrics and how the server was started. Built once,
 * whole, by the server layer (src/http/server.ts), which also releases it; handlers read it, they
 * never create, change or stop anything.
 */
import { Context } from "effect"
import type { ServerOptions, StoreOptions } from "../config/options.js"
import type { Metrics } from "../monitoring/metrics.js"
import type { Monitor } from "../monitoring/monitor.js"
import type { Store } from "../runtime/store.js"

export interface AppState {
  readonly store: Store
  /** Histories, alerts and request figures: the store watched from outside. */
  readonly monitor: Monitor
  readonly server: ServerOptions
  readonly storeOptions: StoreOptions
  /** Aborted when shutdown begins: open event streams end, application health answers 503. */
  readonly closing: AbortController
  /** The port the server listens on (differs from `server.port` when that is 0). */
  readonly port: () => number
  /** Prometheus metrics of the store and of every request. */
  readonly metrics: Metrics
  /** The secret of the MCP endpoint's sealed session ids when given (a cluster's); else the store's own (src/http/gateway/session-seal.ts). */
  readonly sessionSecret?: string | Uint8Array | undefined
}

export class App extends Context.Tag("mcp-store/App")<App, AppState>() {}
