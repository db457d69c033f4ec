/**
 * Supplies the service machine's side effects (src/machines/service.ts) with real MCP
 * connections (src/mcp). It also owns every connection it opens: `closeAll()` ends whatever is
 * still open when the store stops, including a connection that an aborted attempt created.
 * Each connection is opened with the store's message size limit, and as its service's work
 * (src/runtime/process-guard.ts), so that an uncaught error from it is logged with the service's name.
 */
import { fromCallback, fromPromise } from "xstate"
import { resolveDefinition, scopeLabel } from "../domain/service.js"
import { connect } from "../mcp/connect.js"
import { Cancel, McpRequestError, type Catalog, type McpConnection, type ToolInfo } from "../mcp/types.js"
import { inService } from "./process-guard.js"
import { oauthConfigOf, type OAuthManager } from "./oauth.js"
import {
  serviceMachine,
  type CheckInput,
  type ConnectInput,
  type ConnectionCommand,
  type ConnectOutput,
  type ConnectionInput,
  type ServiceEvent
} from "../machines/service.js"

/** How the registry's connections are opened. */
export interface ConnectionOptions {
  /** The largest message read from an upstream (`StoreLimits.maxMessageBytes`); the default is 16 MiB. */
  readonly maxMessageBytes?: number | undefined
}

/** Connections opened and not yet closed, with one close promise each (close is idempotent). */
export class ConnectionRegistry {
  private readonly open = new Map<McpConnection, Promise<void> | undefined>()

  constructor(readonly options: ConnectionOptions = {}) {}

  track(connection: McpConnection): McpConnection {
    this.open.set(connection, undefined)
    return connection
  }

  /** Closes a connection once; every caller gets the same promise. */
  close(connection: McpConnection | undefined): Promise<void> {
    if (connection === undefined) return Promise.resolve()
    const pending = this.open.get(connection)
    if (pending) return pending
    const closing = connection.close().catch(() => undefined).finally(() => this.open.delete(connection))
    this.open.set(connection, closing)
    return closing
  }

  /** Closes everything still open (store shutdown). */
  async closeAll(): Promise<void> {
    await Promise.all([...this.open.keys()].map((c) => this.close(c)))
  }

  get size(): number {
    return this.open.size
  }

  /** Open connections that run a local process. */
  processCount(): number {
    let n = 0
    for (const c of this.open.keys()) if (c.pid !== undefined) n += 1
    return n
  }
}

const describe = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/** The service machine with real MCP side effects; every connection is tracked by `registry`. */
export const liveServiceMachine = (registry: ConnectionRegistry, clientName = "mcp-store", oauth?: OAuthManager) =>
  serviceMachine.provide({
    actors: {
      connect: fromPromise<ConnectOutput, ConnectInput>(async ({ input, signal }) => {
        let resolved: ReturnType<typeof resolveDefinition>
        try {
          resolved = resolveDefinition(input.definition)
        } catch (e) {
          // A hand-edited definition that is not usable: no retry can mend it, only an edit.
          throw new McpRequestError("transport", `invalid definition: ${describe(e)}`, undefined, undefined, {
            permanent: true,
            hint: "fix the service's definition (update_service, or the services file)"
          })
        }
        const { maxMessageBytes } = registry.options
        // A remote service's token source (src/runtime/oauth.ts): idle until an upstream asks for OAuth.
        const auth =
          resolved.kind === "remote" && oauth !== undefined
            ? oauth.forService(input.scope, input.name, resolved.url, oauthConfigOf((input.definition as Record<string, unknown>)["oauth"]))
            : undefined
        const opened = await inService({ name: input.name, scope: scopeLabel(input.scope) }, () =>
          connect(resolved, { timeoutMs: input.timeoutMs, signal, clientName, auth, ...(maxMessageBytes !== undefined ? { maxMessageBytes } : {}) })
        )
        const connection = registry.track(opened)
        try {
          if (signal.aborted) throw new McpRequestError("aborted", "connection attempt cancelled")
          const tools = await connection.listTools({ timeoutMs: input.timeoutMs, signal })
          // Resources and prompts (only what the server declared). A server whose tools work is
          // connected even when these fail: the failure is noted, and the lists are asked again later.
          let catalog: Catalog | undefined
          let catalogError: string | undefined
          try {
            catalog = await connection.listCatalog({ timeoutMs: input.timeoutMs, signal })
          } catch (e) {
            if (signal.aborted) throw e
            catalogError = describe(e)
          }
          // A result that arrives after the actor stopped is dropped by XState: release it here.
          if (signal.aborted) throw new McpRequestError("aborted", "connection attempt cancelled")
          return { connection, tools, catalog, catalogError }
        } catch (e) {
          await registry.close(connection)
          throw e
        }
      }),
      holdConnection: fromCallback<ConnectionCommand, ConnectionInput>(({ input, sendBack, receive }) => {
        const send = (event: ServiceEvent) => sendBack(event)
        const offClose = input.connection.onClose((reason) =>
          send({ type: "TRANSPORT_CLOSED", reason: `transport closed: ${reason}` })
        )
        const offTools = input.watchTools
          ? input.connection.onToolsChanged(() => send({ type: "TOOLS_CHANGED" }))
          : () => undefined
        const offCatalog = input.watchTools ? input.connection.onCatalogChanged(() => send({ type: "CATALOG_CHANGED" })) : () => undefined
        // The health check running, if any: withdrawn by CANCEL_CHECK, a new check, or the end of the connection.
        let check: Cancel | undefined
        const withdraw = () => {
          check?.abort()
          check = undefined
        }
        receive((command) => {
          withdraw()
          if (command.type !== "CHECK_HEALTH") return
          const abort = (check = new Cancel())
          const settled = () => {
            if (abort.aborted) return false
            check = undefined
            return true
          }
          input.connection.ping({ timeoutMs: command.timeoutMs, signal: abort }).then(
            (ms) => {
              if (settled()) send({ type: "HEALTH_REPORT", ok: true, responseTimeMs: ms })
            },
            (e: unknown) => {
              if (!settled()) return
              if (e instanceof McpRequestError && e.kind === "session_expired") {
                send({ type: "TRANSPORT_CLOSED", reason: `session expired: ${e.message}`, immediate: true })
              } else {
                send({ type: "HEALTH_REPORT", ok: false, error: describe(e) })
              }
            }
          )
        })
        return () => {
          withdraw()
          offClose()
          offTools()
          offCatalog()
          void registry.close(input.connection)
        }
      }),
      listTools: fromPromise<ReadonlyArray<ToolInfo>, CheckInput>(({ input, signal }) =>
        input.connection.listTools({ timeoutMs: input.timeoutMs, signal })
      ),
      listCatalog: fromPromise<Catalog, CheckInput>(({ input, signal }) => input.connection.listCatalog({ timeoutMs: input.timeoutMs, signal })),
      closeConnection: fromPromise<void, { readonly connection: McpConnection | undefined }>(({ input }) =>
        registry.close(input.connection)
      )
    }
  })
