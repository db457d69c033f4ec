/**
 * The MCP endpoint's 2026-07-28 face: `/mcp` and `/for_agent/{id}/mcp` answer sessionless requests
 * (each carries its protocol version and client facts in `_meta`) beside the 2025 sessions of
 * endpoint.ts, on the same URLs. The SDK's classifier (`classifyInboundRequest`, as its
 * `isLegacyRequest` runs it) routes each request: 2025 traffic (initialize, a session's requests,
 * GET and DELETE) to the sessions, everything else to a `createMcpHandler` (SDK v2, modern only),
 * which owns the wire rules: `server/discover`, the `_meta` envelope, `Mcp-Method`/`Mcp-Name`
 * against the body (-32020), unsupported versions (-32022), `resultType`, `ttlMs`/`cacheScope`,
 * progress on the request's own stream. The handler is served at the Node level (`serveNode`):
 * the HTTP layer has parsed the body, so the web Request it is given carries headers only.
 *
 * Each request the handler serves gets a fresh SDK server for its caller (scope, the key's tool
 * allow-list), nothing of it kept after the answer. The hot request, a `tools/call` that plainly
 * passes every rule the handler checks (`plainCallOf`), is answered on the store's own path
 * instead (`serveCall`): the per-request server, transport, validation and web Response cost a
 * modern call 1.2 to 1.35 times a 2025 session's CPU. It makes the same call (`callTool`, which the
 * SDK's `tools/call` handler also runs) and writes the answer as the SDK does (`resultType`, the
 * server's identity in `_meta`, an event stream from the first notification); any other request,
 * and any call that is not plain, is the handler's. Calls go through the same pipeline as every
 * other call (face.ts), on the `Calls` and `Catalog` services the endpoint's layer takes once
 * (`McpOperations`, given to the constructor).
 * A call, read or prompt whose upstream asks for input is held by the store for a client that
 * declared the capability, answered `input_required` and taken back by its retry (`inputTurnOf`).
 * `subscriptions/listen` streams are fed by the store's own events, per scope and per key
 * (`ListenBus`), and capped; at shutdown they end gracefully.
 * The tasks extension: a client that declares it, calling a tool whose upstream answers a task,
 * gets a task of the store's (its id sealed: whose it is, the service, the upstream's id) and
 * follows it with tasks/get, tasks/update and tasks/cancel, answered on the store's own path and
 * relayed to the upstream (`serveTask`); any other client gets the call's result (the store follows
 * the task, src/mcp/session.ts).
 */
import { AsyncLocalStorage } from "node:async_hooks"
import type { IncomingMessage, ServerResponse } from "node:http"
import { Cause, Exit, type Effect } from "effect"
import {
  CLIENT_CAPABILITIES_META_KEY,
  LOG_LEVEL_META_KEY,
  SERVER_INFO_META_KEY,
  classifyInboundRequest,
  createMcpHandler,
  inputRequired,
  isCallToolResult,
  isJsonContentType,
  type ClientCapabilities,
  type InboundClassificationOutcome,
  ProtocolError,
  ResourceNotFoundError,
  Server,
  type CacheHint,
  type CallToolResult,
  type LoggingLevel,
  type LoggingMessageNotification,
  type ServerContext,
  type McpHttpHandler,
  type ServerEvent,
  type ServerEventBus
} from "@modelcontextprotocol/server"
import { LoggingLevelSchema } from "@modelcontextprotocol/core"
// The engine's errors (src/mcp/protocol-error.ts): a declined upstream request travels back to it as one.
import { mcpError, ProtocolErrorCode } from "../../mcp/protocol-error.js"
import { isStoreError, ValidationError } from "../../domain/errors.js"
import { scopeLabel, type Scope } from "../../domain/service-definition.js"
import { keyShare } from "../../domain/key-share.js"
import { readTraceContext, type TraceContext } from "../../domain/trace-context.js"
import type { ToolGate } from "../../domain/tool-filter.js"
import { log } from "../../logging/log.js"
import type { Monitor, MonitorEvent } from "../../monitoring/monitor.js"
import { TASK_METHODS, TASKS_EXTENSION, type CallProgress, type TaskMethod, type UpstreamRequestRelay } from "../../mcp/types.js"
import type { CatalogError, CatalogInput } from "../../runtime/catalog.js"
import type { CatalogOperations } from "../../runtime/operations.js"
import { runToPromise } from "../../runtime/run.js"
import type { Store } from "../../runtime/store.js"
import { taskEnded } from "../../runtime/task-relay.js"
import type { SealSource, SessionSeal } from "./session-seal.js"
import { openMethodSpan, tapAnswer, underSpan } from "./method-spans.js"
import {
  callOverMcp,
  heldCallOverMcp,
  heldOverMcp,
  startOverMcp,
  McpTaskStarted,
  type HeldAnswer,
  type McpOperations,
  type InputTurn,
  mcpPrompts,
  mcpServer,
  mcpResources,
  mcpResourceTemplates,
  jsonRpcError,
  offeredTools,
  rpcErrorOf,
  scopeContext,
  serverInfoOf
} from "./face.js"
import { listedNames, listedTools, routeSearchCall, type ToolListing } from "./search-mode.js"

/** Who a modern request comes from: what its answers may show, and whether they depend on its key. */
export interface ModernCaller {
  readonly scope: Scope
  /** The key's tool allow-list (an agent key's `tools`). */
  readonly gate: ToolGate | undefined
  /** Search mode (search-mode.ts); undefined: the whole list. */
  readonly listing?: ToolListing | undefined
  /** `private` when the answers depend on the caller's key (an agent key), else `public`. */
  readonly cacheScope: "public" | "private"
  /** Who holds the caller's key (a digest): only the same key takes back a call held for its input. */
  readonly owner: string
  /** The request carried an API key: its listen streams count against the key's share (`keyShare`). */
  readonly keyed: boolean
  /** Who the caller is in words (its key's role, agent and label), shown to the approver of a call that needs one. */
  readonly who?: string | undefined
  /** The resources a `subscriptions/listen` request asks updates of, subscribed before its stream opens. */
  readonly resourceStream?: ResourceStream | undefined
  /** The span of the request being served (tracing on only): the parent of its upstream requests' spans. */
  readonly span?: TraceContext | undefined
}

/** The resource URIs of a listen stream, subscribed before the stream opens (`McpGateway.subscribeStream`). */
export interface ResourceStream {
  /** The URIs asked for that are subscribed, or being subscribed (a shared service's): the stream's acknowledged filter names these only. */
  readonly subscribed: ReadonlyArray<string>
  /** Where the stream's updates go once it is open (undefined: nowhere, it closed). */
  deliverTo(onUpdate: ((uri: string) => void) | undefined): void
  /** Drops the stream's subscriptions. */
  close(): void
}

/** What the modern face shares with the 2025 sessions (`McpGateway`): the upstream resource subscriptions and the log relay. */
export interface SessionSide {
  /** `signal`: the client went away (its request closed): the subscribes are no longer waited for, and it rejects. */
  subscribeStream(scope: Scope, owner: string, uris: ReadonlyArray<string>, signal: AbortSignal): Promise<ResourceStream>
  hearLogs(scope: Scope, service: string, level: LoggingLevel, send: (message: LoggingMessageNotification["params"]) => void): () => void
}

/** How long a client may keep a tool, resource or prompt list (ms): list changes come on `subscriptions/listen` at once. */
export const LIST_TTL_MS = 5_000

/** The caps of the modern face. */
export interface ModernOptions {
  /** Open `subscriptions/listen` streams, every scope and key together (beyond it: -32603 "Subscription limit reached"). */
  readonly maxListenStreams: number
  /** Where the key that seals the store's task ids comes from (the sessions' seal, src/http/gateway/session-seal.ts). */
  readonly seal: SealSource
}

/**
 * The change events of `subscriptions/listen` streams, scoped: each stream is registered with its
 * caller (read from the request it was opened by) and told only of its own scope's changes, and of
 * a tool list change only when the list its key sees changed (as the 2025 sessions are).
 */
export class ListenBus implements ServerEventBus {
  private readonly listeners = new Set<Listener>()

  constructor(
    private readonly store: Store,
    private readonly catalog: CatalogOperations,
    private readonly callers: AsyncLocalStorage<ModernCaller>
  ) {}

  /**
   * The SDK's unscoped publish (`handler.notify`): refused, since it would reach every scope's
   * streams. The store announces through `toolsChanged`, `catalogChanged` and resource updates.
   */
  publish(event: ServerEvent): void {
    throw new Error(`mcp-store announces ${event.kind} per scope, not to every subscriptions/listen stream`)
  }

  /** Called by the SDK's listen router as a stream opens, inside the request that opened it. */
  subscribe(deliver: (event: ServerEvent) => void): () => void {
    const caller = this.callers.getStore()
    // Every listen stream is opened by a request of the modern face, which runs with its caller.
    if (caller === undefined) throw new Error("subscriptions/listen opened outside a request of the MCP endpoint")
    const ctx = scopeContext(this.store, caller.scope)
    const listener: Listener = {
      caller,
      label: scopeLabel(caller.scope),
      listed: listedNames(this.store, caller.scope, caller.gate, caller.listing),
      catalogListed: this.catalog.catalogFingerprint(ctx),
      deliver
    }
    this.listeners.add(listener)
    // The SDK delivers an update only to a stream that asked for its URI (and only when `subscribe` is offered).
    const stream = caller.resourceStream
    stream?.deliverTo((uri) => deliver({ kind: "resource_updated", uri }))
    return () => {
      this.listeners.delete(listener)
      stream?.deliverTo(undefined)
    }
  }

  /** A scope's tool lists may have changed: tell each of its streams whose list did. */
  toolsChanged(label: string): void {
    const lists = new Map<ToolListing | undefined, Map<ToolGate | undefined, string>>()
    for (const l of this.listeners) {
      if (l.label !== label) continue
      let byGate = lists.get(l.caller.listing)
      if (byGate === undefined) lists.set(l.caller.listing, (byGate = new Map()))
      let names = byGate.get(l.caller.gate)
      if (names === undefined) byGate.set(l.caller.gate, (names = listedNames(this.store, l.caller.scope, l.caller.gate, l.caller.listing)))
      if (names === l.listed) continue
      l.listed = names
      l.deliver({ kind: "tools_list_changed" })
    }
  }

  /** A scope's resource or prompt lists may have changed: tell each of its streams whose list did. */
  catalogChanged(label: string): void {
    let lists: ReturnType<CatalogOperations["catalogFingerprint"]> | undefined
    for (const l of this.listeners) {
      if (l.label !== label) continue
      lists ??= this.catalog.catalogFingerprint(scopeContext(this.store, l.caller.scope))
      if (lists.resources !== l.catalogListed.resources) l.deliver({ kind: "resources_list_changed" })
      if (lists.prompts !== l.catalogListed.prompts) l.deliver({ kind: "prompts_list_changed" })
      l.catalogListed = lists
    }
  }

  /** Open streams. */
  get size(): number {
    return this.listeners.size
  }
}

interface Listener {
  readonly caller: ModernCaller
  readonly label: string
  /** The tool names last announced to the stream (or seen when it opened). */
  listed: string
  catalogListed: { readonly resources: string; readonly prompts: string }
  readonly deliver: (event: ServerEvent) => void
}

/** A catalog failure as the 2026-07-28 error a client understands (`rpcErrorOf`; a missing resource is -32602 with its URI). */
const protocolErrorOf = (e: unknown): unknown => {
  if (!isStoreError(e)) return e
  if (e._tag === "ResourceNotFound") return new ResourceNotFoundError(e.uri, e.message)
  const { code, message, data } = rpcErrorOf(e)
  return new ProtocolError(code, message, data)
}

/**
 * An upstream's elicitation or sampling during a modern request (`what`: a call, a read, a prompt
 * request) whose client declared neither capability (one that did answers `input_required`
 * results, through a held call): declined, in words that say why.
 */
const declinedOnModern =
  (what: string): UpstreamRequestRelay =>
  (request) =>
    Promise.reject(
      mcpError(ProtocolErrorCode.InvalidRequest,
        `mcp-store declined ${request.method}: the MCP 2026-07-28 client that made this ${what} did not declare the capability to answer it`
      )
    )

/**
 * How a modern request that may need input (tools/call, resources/read, prompts/get) takes part
 * in rounds: undefined when its client declared neither elicitation nor sampling (the upstream's
 * requests are then declined), else the requests it can answer and, for a retry, its state and
 * answers.
 */
const inputTurnOf = (c: ServerContext): InputTurn | undefined => {
  const envelope = c.mcpReq.envelope as Record<string, unknown> | undefined
  const capabilities = envelope?.[CLIENT_CAPABILITIES_META_KEY] as ClientCapabilities | undefined
  if (capabilities?.elicitation === undefined && capabilities?.sampling === undefined) return undefined
  const state = c.mcpReq.requestState<unknown>()
  return {
    retry: typeof state === "string" ? { state, responses: c.mcpReq.inputResponses ?? {} } : undefined,
    // A URL elicitation (an approval's page) only to a client that declared the URL mode: `elicitation: {}` is form only.
    accepts: (method: string, params?: Readonly<Record<string, unknown>>) =>
      method === "elicitation/create"
        ? capabilities.elicitation !== undefined && (params?.["mode"] !== "url" || capabilities.elicitation.url !== undefined)
        : method === "sampling/createMessage" && capabilities.sampling !== undefined
  }
}

/** A held request's round as the SDK answers it: its end (`ended`), or an `input_required` result with the store's state. */
const roundResult = <A, R>(held: HeldAnswer<A>, ended: (a: A) => R): R => {
  if ("inputRequests" in held) return inputRequired({ inputRequests: held.inputRequests as never, requestState: held.requestState }) as never
  return ended(held.ended)
}

/** A retry whose state does not fit its call, as the client's invalid params (-32602); anything else as it is. */
const retryRefused = (e: unknown): unknown => (e instanceof ValidationError ? new ProtocolError(ProtocolErrorCode.InvalidParams, e.message) : e)

/**
 * A 2025-era request told without running the SDK's classifier: one JSON-RPC message with no `io.modelcontextprotocol/` key in its `_meta` and no 2026-era
 * MCP-Protocol-Version header is legacy by the classifier's own rules (`classifyInboundRequest`:
 * no envelope claim and no modern header). Anything else is left to the classifier.
 */
const plainlyLegacy = (req: IncomingMessage, body: unknown): boolean => {
  const version = req.headers["mcp-protocol-version"]
  if (version !== undefined && !(typeof version === "string" && /^\s*20(24|25)-/.test(version))) return false
  if (typeof body !== "object" || body === null || Array.isArray(body)) return false
  const params = (body as { params?: unknown }).params
  if (params === undefined) return true
  if (typeof params !== "object" || params === null) return false
  const meta = (params as { _meta?: unknown })._meta
  if (meta === undefined) return true
  if (typeof meta !== "object" || meta === null) return false
  for (const key in meta) if (key.startsWith("io.modelcontextprotocol/")) return false
  return true
}

/** The value of a request header as a web `Headers` would give it (repeated headers joined with ", "). */
const headerOf = (req: IncomingMessage, name: string): string | undefined => {
  const value = req.headers[name]
  return Array.isArray(value) ? value.join(", ") : value
}

/**
 * How the SDK routes a POST with this parsed body: what `isLegacyRequest` and `createMcpHandler`
 * decide (they run `classifyInboundRequest` on the method, the standard headers and the body; no
 * body is legacy), without the web Request they would be handed.
 */
const classify = (req: IncomingMessage, body: unknown): InboundClassificationOutcome | undefined => {
  if (body === undefined) return undefined
  const protocolVersionHeader = headerOf(req, "mcp-protocol-version")
  const mcpMethodHeader = headerOf(req, "mcp-method")
  const mcpNameHeader = headerOf(req, "mcp-name")
  return classifyInboundRequest({
    httpMethod: "POST",
    ...(protocolVersionHeader !== undefined ? { protocolVersionHeader } : {}),
    ...(mcpMethodHeader !== undefined ? { mcpMethodHeader } : {}),
    ...(mcpNameHeader !== undefined ? { mcpNameHeader } : {}),
    body
  })
}

/** The revision the SDK's handler serves (its supported modern versions: this one). */
const MODERN_REVISION = "2026-07-28"

/**
 * Whether a modern request names the revision served and carries the version and method headers,
 * as the SDK's handler checks before it dispatches (the classifier has checked that headers
 * present agree with the body).
 */
const servedRevisionWithHeaders = (req: IncomingMessage, outcome: InboundClassificationOutcome): boolean =>
  outcome.kind === "modern" &&
  outcome.classification.revision === MODERN_REVISION &&
  headerOf(req, "mcp-protocol-version") !== undefined &&
  headerOf(req, "mcp-method") !== undefined

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

/** A `tools/call` the store answers on its own path (`plainCallOf`): its id and params as the client sent them. */
interface PlainCall {
  readonly id: string | number
  readonly params: { readonly name: string; readonly arguments?: Record<string, unknown> | undefined; readonly _meta: Record<string, unknown> }
}

/**
 * A classified modern request that is plainly a valid `tools/call` by every rule the SDK's handler
 * checks before and around its handler, so that the SDK would call the store's handler with it and
 * nothing else: a JSON body, this revision, `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name`
 * present and equal to the body (no Base64 sentinel), `name` a string, `arguments` an object if
 * any, a progress token a string or a number if any, no other params (no task, no retry of an
 * input round), and a client that declared neither elicitation nor sampling (one that did takes
 * part in input rounds, which the SDK's handler serves). Anything else is left to the SDK's
 * handler, which answers it by its own rules. The classifier has already checked the envelope and
 * the headers it compares (a mismatch is not `modern`).
 */
const plainCallOf = (req: IncomingMessage, outcome: InboundClassificationOutcome): PlainCall | undefined => {
  if (outcome.kind !== "modern" || outcome.messageKind !== "request" || outcome.classification.revision !== MODERN_REVISION) return undefined
  const message = outcome.message as { readonly id?: unknown; readonly method?: unknown; readonly params?: unknown }
  if (message.method !== "tools/call" || (typeof message.id !== "string" && typeof message.id !== "number")) return undefined
  if (!isJsonContentType(headerOf(req, "content-type") ?? null)) return undefined
  if (headerOf(req, "mcp-protocol-version") !== MODERN_REVISION || headerOf(req, "mcp-method") !== "tools/call") return undefined
  const params = message.params
  if (!isRecord(params)) return undefined
  for (const key in params) if (key !== "name" && key !== "arguments" && key !== "_meta") return undefined
  const { name, arguments: args, _meta: meta } = params
  if (typeof name !== "string" || name.startsWith("=?base64?") || headerOf(req, "mcp-name") !== name) return undefined
  if ((args !== undefined && !isRecord(args)) || !isRecord(meta)) return undefined
  const token = meta["progressToken"]
  if (token !== undefined && typeof token !== "string" && typeof token !== "number") return undefined
  const capabilities = meta[CLIENT_CAPABILITIES_META_KEY]
  if (!isRecord(capabilities) || capabilities["elicitation"] !== undefined || capabilities["sampling"] !== undefined) return undefined
  return { id: message.id, params: { name, arguments: args, _meta: meta } }
}

/**
 * A tool call's result as a 2026-07-28 client is given it, whoever serves the request: a result
 * without content gets `content: []`, and structured content that is not an object also comes as
 * text when no text block carries it (SEP-2106; what the SDK's `projectCallToolResult` does on
 * this revision, which ignores the output schema).
 */
const modernCallResult = (result: CallToolResult): CallToolResult => {
  const r = result.content === undefined && !("task" in result) ? { ...result, content: [] } : result
  const sc = r.structuredContent as unknown
  if (sc === undefined || isRecord(sc) || r.content.some((c) => c.type === "text")) return r
  return { ...r, content: [...r.content, { type: "text", text: JSON.stringify(sc) }] }
}

/**
 * A result on the wire of the store's own path, encoded as the SDK encodes a `tools/call` result on
 * this revision: `resultType` (`complete` unless the result has one) and the server's identity in
 * `_meta` (unless it has one). `tools/call` carries no cache fields.
 */
const encodeCallResult = (result: Record<string, unknown>, serverInfo: { readonly name: string; readonly version: string }): Record<string, unknown> => {
  const typed = result["resultType"] === undefined ? { ...result, resultType: "complete" } : result
  const meta = typed["_meta"]
  if (meta === undefined) return { ...typed, _meta: { [SERVER_INFO_META_KEY]: serverInfo } }
  if (!isRecord(meta) || meta[SERVER_INFO_META_KEY] !== undefined) return typed
  return { ...typed, _meta: { ...meta, [SERVER_INFO_META_KEY]: serverInfo } }
}

/** A failure thrown by a call as the SDK's dispatcher answers it: its integer code (-32603 if none; -32002 is -32602 on this revision), message and data. */
const jsonRpcErrorOf = (e: unknown) => {
  const error = (typeof e === "object" && e !== null ? e : { message: String(e) }) as { code?: unknown; message?: unknown; data?: unknown }
  const code = Number.isSafeInteger(error.code) ? (error.code as number) : -32603
  return { code: code === -32002 ? -32602 : code, message: typeof error.message === "string" ? error.message : "Internal error", ...(error.data !== undefined ? { data: error.data } : {}) }
}

/**
 * How long an event stream of the SDK's handler (a listen, a request's stream) may wait for its
 * client to read (ms): the SDK's stream queues what it sends meanwhile, so a client that stopped
 * reading is let go then rather than held with a growing queue.
 */
const STALLED_MS = 30_000

/** How long an event stream may stay silent before a keep-alive comment (the SDK's own interval). */
const KEEP_ALIVE_MS = 15_000

/**
 * The response of one request on the store's own path: one JSON answer, or, from the first
 * notification sent before it (progress, log messages), an event stream that the answer ends.
 * Written as the SDK's per-request transport writes it.
 */
class CallResponse {
  private streaming = false
  private keepAlive: NodeJS.Timeout | undefined

  constructor(private readonly res: ServerResponse) {}

  /** Sends a notification on the request's stream (opening it); resolves when it is written (or the client is gone). */
  notify(notification: { readonly method: string; readonly params?: unknown }): Promise<void> {
    const res = this.res
    if (res.destroyed || res.writableEnded) return Promise.resolve()
    if (!this.streaming) this.open()
    if (res.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", ...notification })}\n\n`)) return Promise.resolve()
    return new Promise((resolve) => {
      const done = () => {
        res.off("drain", done)
        res.off("close", done)
        resolve()
      }
      res.on("drain", done)
      res.on("close", done)
    })
  }

  /**
   * A notification that may be dropped (a log message): not written while the client does not
   * read (its stream's buffer full), so a client that stops reading holds one message, not all.
   */
  offer(notification: { readonly method: string; readonly params?: unknown }): void {
    if (this.res.writableNeedDrain) return
    void this.notify(notification)
  }

  /** Ends the response with the request's answer. */
  answer(message: unknown): void {
    const res = this.res
    this.stop()
    if (res.destroyed || res.writableEnded) return
    const text = JSON.stringify(message)
    if (this.streaming) {
      res.end(`event: message\ndata: ${text}\n\n`)
      return
    }
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) }).end(text)
  }

  /** The exchange was closed before its answer (the client went, or the face closed): nothing more is written. */
  abandon(): void {
    this.stop()
    if (this.res.writableEnded) return
    if (this.streaming || this.res.headersSent) this.res.end()
    else this.res.writeHead(499).end()
  }

  private open(): void {
    this.streaming = true
    this.res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache, no-transform", connection: "keep-alive", "x-accel-buffering": "no" })
    this.keepAlive = setInterval(() => {
      if (!this.res.destroyed && !this.res.writableEnded) this.res.write(": keepalive\n\n")
    }, KEEP_ALIVE_MS)
    this.keepAlive.unref()
  }

  private stop(): void {
    if (this.keepAlive !== undefined) clearInterval(this.keepAlive)
    this.keepAlive = undefined
  }
}

/** What one modern `tools/call` gives the store's call, whoever serves the request (the store's own path or the SDK's handler). */
interface ModernToolCall {
  readonly params: { readonly name: string; readonly arguments?: Record<string, unknown> | undefined; readonly _meta?: Record<string, unknown> | undefined }
  /** The request's envelope (the reserved keys of its `_meta`). */
  readonly envelope: Record<string, unknown> | undefined
  /** How the call takes part in input rounds (`inputTurnOf`), undefined for a client that cannot. */
  readonly turn: InputTurn | undefined
  /** Aborted when the client closes the response stream (the modern era's cancellation). */
  readonly signal: AbortSignal
  /** Sends a notification on the request's own response stream. */
  readonly notify: (notification: { readonly method: string; readonly params: Record<string, unknown> }) => Promise<void>
  /** Sends a notification that may be dropped (a log message) while the client does not read; `notify` when absent. */
  readonly offer?: (notification: { readonly method: string; readonly params: Record<string, unknown> }) => void
  /** The JSON-RPC request id, for the request's span. */
  readonly requestId: string | number
}

/** Whether a modern request's client declared the tasks extension in its capabilities (`_meta`). */
const takesTasks = (meta: Record<string, unknown> | undefined): boolean => {
  const capabilities = meta?.[CLIENT_CAPABILITIES_META_KEY]
  const extensions = isRecord(capabilities) ? capabilities["extensions"] : undefined
  return isRecord(extensions) && isRecord(extensions[TASKS_EXTENSION])
}

/** The error of a task request from a client that did not declare the extension (-32021, naming it). */
const MISSING_TASKS_CAPABILITY = { code: -32021, message: "Missing required client capability", data: { requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } } }

/** A task id the store did not hand to this caller (or that no longer opens): as the extension words a task not found. */
const TASK_NOT_FOUND = { code: -32602, message: "Failed to retrieve task: Task not found" }

/** The longest task id read (the store's are far shorter). */
const MAX_TASK_ID_LENGTH = 4096

/**
 * The web `Request` the SDK's handler is given for a POST whose body is already parsed (the handler
 * reads the parsed body, never the request's): its URL, method and headers, no body, and `signal`,
 * aborted when the client goes (the SDK then closes the request's exchange). The signal is set on
 * the request rather than passed to its constructor, which would make the request follow it with
 * a signal of its own (a dependent signal and its bookkeeping, per request).
 */
const requestOf = (req: IncomingMessage, signal: AbortSignal): Request => {
  const headers: Record<string, string> = {}
  for (const name in req.headers) {
    if (name.startsWith(":") || name === "content-encoding" || name === "transfer-encoding" || name === "content-length") continue
    const value = headerOf(req, name)
    if (value !== undefined) headers[name] = value
  }
  const request = new Request(`http://${headerOf(req, "host") ?? "localhost"}${req.url ?? "/"}`, { method: "POST", headers })
  Object.defineProperty(request, "signal", { value: signal })
  return request
}

/** The JSON-RPC id an error answer echoes: the body's, when it is one request with a string or number id. */
const echoableId = (body: unknown): string | number | null => {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return null
  const { method, id } = body as { method?: unknown; id?: unknown }
  return typeof method === "string" && (typeof id === "string" || typeof id === "number") ? id : null
}

/**
 * Serves one POST (its body parsed) with a `createMcpHandler` handler, at the Node level: what
 * `toNodeHandler` of @modelcontextprotocol/node does, without serializing the parsed body again
 * into the request, and with a JSON answer written in one piece (an event stream is written as it
 * comes, minding back-pressure). Resolves when the response is finished.
 */
const serveNode = async (handler: McpHttpHandler, req: IncomingMessage, res: ServerResponse, body: unknown, onerror: (e: Error) => void): Promise<void> => {
  let finished = false
  const abort = new AbortController()
  res.on("close", () => {
    if (!finished) abort.abort()
  })
  if (res.destroyed) abort.abort()
  let response: Response
  try {
    response = await handler.fetch(requestOf(req, abort.signal), { parsedBody: body })
  } catch (error) {
    onerror(error instanceof Error ? error : new Error(String(error)))
    response = Response.json({ jsonrpc: "2.0", error: { code: -32603, message: "Internal server error" }, id: echoableId(body) }, { status: 500 })
  }
  const headers: Record<string, string> = {}
  for (const [name, value] of response.headers) headers[name] = value
  if (response.body === null) {
    finished = true
    res.writeHead(response.status, headers).end()
    return
  }
  if (!(response.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    const bytes = Buffer.from(await response.arrayBuffer().catch(() => new ArrayBuffer(0)))
    finished = true
    res.writeHead(response.status, headers).end(bytes)
    return
  }
  res.writeHead(response.status, headers)
  let drained: (() => void) | undefined
  res.on("drain", () => {
    drained?.()
    drained = undefined
  })
  const closed = new Promise<void>((resolve) => abort.signal.addEventListener("abort", () => resolve(), { once: true }))
  try {
    for await (const chunk of response.body) {
      if (abort.signal.aborted) break
      if (res.write(chunk)) continue
      // The client does not read: what the stream sends meanwhile waits in memory, for STALLED_MS at most.
      let timer: NodeJS.Timeout | undefined
      const stalled = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), STALLED_MS)))
      const gaveUp = await Promise.race([new Promise<boolean>((resolve) => (drained = () => resolve(false))), closed.then(() => false), stalled])
      clearTimeout(timer)
      if (gaveUp) {
        log.warn(`MCP 2026-07-28: an event stream's client read nothing for ${STALLED_MS / 1000} s: the stream is ended`, { event: "mcp_stream_stalled" })
        res.destroy()
        break
      }
    }
  } catch {
    // The stream failed or was cancelled: the response ends here.
  }
  finished = true
  res.end()
}

/** A listen request's body with `uris` as its resource subscriptions (none: the field left out, as the SDK's acknowledgement leaves an empty one out). */
const withResourceSubscriptions = (body: unknown, uris: ReadonlyArray<string>): unknown => {
  const request = body as { params: { notifications: Record<string, unknown> } }
  const notifications: Record<string, unknown> = { ...request.params.notifications }
  delete notifications["resourceSubscriptions"]
  if (uris.length > 0) notifications["resourceSubscriptions"] = uris
  return { ...request, params: { ...request.params, notifications } }
}

/**
 * The filter of a `subscriptions/listen` request (undefined for any other body): its URIs only when
 * they are strings (else the SDK refuses the filter), and whether it asks for task notifications.
 */
const listenFilterOf = (body: unknown): { readonly resourceSubscriptions: ReadonlyArray<string> | undefined; readonly taskIds: boolean } | undefined => {
  if (typeof body !== "object" || body === null || (body as { method?: unknown }).method !== "subscriptions/listen") return undefined
  const notifications = (body as { params?: { notifications?: { resourceSubscriptions?: unknown; taskIds?: unknown } } }).params?.notifications
  const uris = notifications?.resourceSubscriptions
  return { resourceSubscriptions: Array.isArray(uris) && uris.every((u) => typeof u === "string") ? uris : undefined, taskIds: notifications?.taskIds !== undefined }
}

/**
 * The 2026-07-28 face of the MCP endpoint, for every scope. Owned by the HTTP server with the
 * sessions (`McpGateway`); `shutdown()` ends the listen streams, `close()` the rest.
 */
export class ModernMcp {
  private readonly callers = new AsyncLocalStorage<ModernCaller>()
  readonly bus: ListenBus
  /** Every request but `subscriptions/listen`. */
  private readonly requests: McpHttpHandler
  /** `subscriptions/listen` only: its own handler, so that shutdown ends the streams without aborting calls in flight. */
  private readonly listens: McpHttpHandler
  private readonly onerror = (e: Error) => log.debug(`MCP 2026-07-28 request: ${e.message}`, { event: "mcp_modern_error" })
  private readonly unsubscribeMonitor: () => void
  private closing = false
  /** Open (or opening) listen streams per key (`ModernCaller.owner`), for the key's share (`keyShare`). */
  private readonly listensByOwner = new Map<string, number>()
  private readonly maxListensPerKey: number
  /** The calls in flight on the store's own path (`serveCall`), aborted by `close()`. */
  private readonly inflight = new Set<AbortController>()

  private readonly seal: SealSource

  /**
   * `ops`: the call path and the catalog (the `Calls` and `Catalog` services), taken once by the
   * layer that builds the endpoint (src/http/extras.ts).
   */
  constructor(
    private readonly store: Store,
    monitor: Monitor,
    private readonly resources: SessionSide,
    private readonly ops: McpOperations,
    options: ModernOptions
  ) {
    this.seal = options.seal
    this.maxListensPerKey = keyShare(options.maxListenStreams)
    this.bus = new ListenBus(store, ops.catalog, this.callers)
    const factory = () => {
      const caller = this.callers.getStore()
      if (caller === undefined) throw new Error("a modern MCP request outside the endpoint's routing")
      return this.buildServer(caller)
    }
    const onerror = this.onerror
    this.requests = createMcpHandler(factory, { legacy: "reject", onerror })
    this.listens = createMcpHandler(factory, { legacy: "reject", onerror, bus: this.bus, maxSubscriptions: options.maxListenStreams })
    this.unsubscribeMonitor = monitor.subscribe((e) => this.onMonitorEvent(e))
  }

  private onMonitorEvent(e: MonitorEvent): void {
    if (this.bus.size === 0) return
    if (e.type === "status" || e.type === "catalog_changed") this.bus.catalogChanged(e.scope)
    if (e.type === "removed") {
      // Seen as the store's root receives the event, before the service leaves the scope's actors.
      if (!this.closing) setImmediate(() => this.bus.toolsChanged(e.scope))
      return
    }
    if (e.type === "status" || e.type === "tools_changed") this.bus.toolsChanged(e.scope)
  }

  /**
   * Handles one HTTP request of `/mcp` or `/for_agent/{id}/mcp`: a 2025 one goes to `legacy` (the
   * sessions), a modern one is answered here. `body` is the parsed JSON body (read by the HTTP
   * layer, under its size limit). Resolves when the response is finished.
   */
  async handle(
    caller: ModernCaller,
    req: IncomingMessage,
    res: ServerResponse,
    body: unknown,
    legacy: (req: IncomingMessage, res: ServerResponse, body: unknown) => Promise<void>
  ): Promise<void> {
    // GET and DELETE are 2025 session operations; a POST is classified by the SDK's rules.
    if (req.method !== "POST" || plainlyLegacy(req, body)) return legacy(req, res, body)
    const outcome = classify(req, body)
    if (outcome === undefined || outcome.kind === "legacy") return legacy(req, res, body)
    if (this.closing) return jsonRpcError(res, 503, -32000, "Server shutting down", { headers: { connection: "close" } })
    const call = plainCallOf(req, outcome)
    if (call !== undefined) return this.serveCall(caller, call, res)
    const method = (body as { method?: unknown }).method
    const listen = listenFilterOf(body)
    // Tracing on: the request's span (tools/call has its own, face.ts), ended by its answer.
    if (this.store.tracer.enabled && outcome.kind === "modern") caller = this.traced(caller, req, res, outcome, listen !== undefined)
    // A task request is the store's to answer once it passes the SDK's first rungs: the revision it
    // serves, the version and method headers there (the SDK's handler answers any other, -32022 or -32020).
    if (outcome.kind === "modern" && typeof method === "string" && TASK_METHODS.has(method) && servedRevisionWithHeaders(req, outcome)) {
      return this.serveTask(caller, req, res, body as Record<string, unknown>)
    }
    if (listen === undefined || outcome.kind !== "modern") return this.callers.run(caller, () => serveNode(this.requests, req, res, body, this.onerror))
    // Task status notifications are asked for with `taskIds`: only by a client that declared the
    // extension (the store sends none: its acknowledgement agrees to no task ids).
    if (listen.taskIds && !takesTasks((body as { params?: { _meta?: Record<string, unknown> } }).params?._meta)) {
      return jsonRpcError(res, 200, MISSING_TASKS_CAPABILITY.code, MISSING_TASKS_CAPABILITY.message, { id: (body as { id?: unknown }).id, data: MISSING_TASKS_CAPABILITY.data })
    }
    const held = this.listensByOwner.get(caller.owner) ?? 0
    if (caller.keyed && held >= this.maxListensPerKey) {
      log.warn(`MCP 2026-07-28: subscriptions/listen refused on ${scopeLabel(caller.scope)}: this API key holds ${held} listen streams, its most`, { event: "mcp_listen_refused" })
      // As the SDK answers its own refusal of a listen: HTTP 200, the request's id.
      return jsonRpcError(res, 200, -32603, `Subscription limit reached for this API key (${this.maxListensPerKey} open subscriptions/listen streams)`, { id: (body as { id?: unknown }).id })
    }
    // Counted from before the stream opens to its end, so that listens sent at once cannot pass the cap together.
    this.listensByOwner.set(caller.owner, held + 1)
    let resourceStream: ResourceStream | undefined
    try {
      // Its resources are subscribed first (a `per_user` service's on the caller's own connection):
      // a caller without its credential is refused as a read is, and no stream opens.
      const uris = listen.resourceSubscriptions ?? []
      if (uris.length > 0 && this.ops.catalog.scopeCapabilities(scopeContext(this.store, caller.scope)).subscribe) {
        // The client gone before its stream opens: its subscribes are not waited for (nobody to answer).
        const gone = new AbortController()
        const onClose = () => gone.abort(new Error("the client closed its subscriptions/listen request"))
        res.once("close", onClose)
        if (res.destroyed) onClose()
        try {
          resourceStream = await this.resources.subscribeStream(caller.scope, caller.owner, uris, gone.signal)
        } catch (e) {
          if (gone.signal.aborted) return
          // A `per_user` subscribe refused (no credential, its connections all in use or held, ...): the listen is refused with it.
          const refusal = protocolErrorOf(e)
          const { code, message, data } = refusal instanceof ProtocolError ? refusal : { code: -32603, message: refusal instanceof Error ? refusal.message : String(refusal), data: undefined }
          return jsonRpcError(res, 200, code, message, { id: (body as { id?: unknown }).id, data })
        } finally {
          res.off("close", onClose)
        }
      }
      // The acknowledged filter (the SDK's, from the request) names only the URIs subscribed.
      const served = resourceStream === undefined ? body : withResourceSubscriptions(body, resourceStream.subscribed)
      await this.callers.run({ ...caller, resourceStream }, () => serveNode(this.listens, req, res, served, this.onerror))
    } finally {
      resourceStream?.close()
      const left = (this.listensByOwner.get(caller.owner) ?? 1) - 1
      if (left > 0) this.listensByOwner.set(caller.owner, left)
      else this.listensByOwner.delete(caller.owner)
    }
  }

  /**
   * `caller` with the span of its modern request (tracing on), opened under the request's `_meta`
   * (else its `traceparent` header) and ended by the answer written (`tapAnswer`); as it is for a
   * tools/call (its span is face.ts's) or a message that is not a request.
   */
  private traced(caller: ModernCaller, req: IncomingMessage, res: ServerResponse, outcome: InboundClassificationOutcome & { kind: "modern" }, listen: boolean): ModernCaller {
    const message = outcome.message as { readonly id?: unknown; readonly method?: unknown; readonly params?: unknown }
    const { id, method } = message
    if (outcome.messageKind !== "request" || typeof method !== "string" || method === "tools/call" || (typeof id !== "string" && typeof id !== "number")) return caller
    const revision = outcome.classification.revision
    const traced = openMethodSpan(this.store.tracer, { method, id, params: message.params, protocolVersion: () => revision, header: readTraceContext(req.headers) })
    tapAnswer(res, traced, listen)
    return { ...caller, span: traced.span }
  }

  /**
   * A plain `tools/call` (`plainCallOf`) answered on the store's own path, without the SDK's
   * per-request server and transport: the same call (`callTool`) as the SDK's handler makes,
   * encoded and written as the SDK writes it. Resolves when the response is finished.
   */
  private async serveCall(caller: ModernCaller, call: PlainCall, res: ServerResponse): Promise<void> {
    const abort = new AbortController()
    let finished = false
    res.once("close", () => {
      if (!finished) abort.abort()
    })
    if (res.destroyed) abort.abort()
    const response = new CallResponse(res)
    this.inflight.add(abort)
    let message: unknown
    try {
      const result = await this.callTool(caller, { params: call.params, envelope: call.params._meta, turn: undefined, signal: abort.signal, requestId: call.id, notify: (n) => response.notify(n), offer: (n) => response.offer(n) })
      message = { result: encodeCallResult(result, serverInfoOf(caller.scope)), jsonrpc: "2.0", id: call.id }
    } catch (e) {
      message = { jsonrpc: "2.0", id: call.id, error: jsonRpcErrorOf(e) }
    } finally {
      this.inflight.delete(abort)
    }
    finished = true
    // As the SDK's handler: a request whose exchange was closed is not answered.
    if (abort.signal.aborted) response.abandon()
    else response.answer(message)
  }

  /**
   * One modern `tools/call` of `caller` through the store's call pipeline: the result as the client
   * is given it (before the era's encoding), or an `input_required` round for a client that takes
   * part in rounds. The called service's log messages go on the request's stream while the call
   * lasts when its envelope names a log level; progress too, when it gave a progress token.
   */
  private async callTool(caller: ModernCaller, x: ModernToolCall): Promise<Record<string, unknown>> {
    const { scope, gate } = caller
    const { _meta: meta } = x.params
    // Search mode: search_tools is answered here, call_tool calls the tool it names (search-mode.ts).
    const route = caller.listing === undefined ? x.params : routeSearchCall(this.store, scope, gate, x.params.name, x.params.arguments)
    if ("answer" in route) return modernCallResult(route.answer) as never
    const { name, arguments: args } = route
    const token = meta?.["progressToken"] as string | number | undefined
    const call = {
      name,
      arguments: args,
      // The client's trace context (the W3C keys of the request's `_meta`).
      trace: readTraceContext(meta),
      requestId: x.requestId,
      caller: () => ({ words: caller.who ?? "an MCP client", owner: caller.owner }),
      ...(token !== undefined ? { progress: (p: CallProgress) => x.notify({ method: "notifications/progress", params: { progressToken: token, ...p } }) } : {})
    }
    const wanted = x.envelope?.[LOG_LEVEL_META_KEY]
    const level = wanted === undefined ? undefined : LoggingLevelSchema.safeParse(wanted)
    const service = level?.success === true ? offeredTools(this.store, scope, gate).find((t) => t.name === name)?.service_name : undefined
    const unhear =
      level?.success === true && service !== undefined
        ? this.resources.hearLogs(scope, service, level.data, (message) => {
            const notification = { method: "notifications/message", params: message }
            if (x.offer !== undefined) x.offer(notification)
            else void x.notify(notification).catch(() => undefined)
          })
        : undefined
    try {
      if (x.turn === undefined && takesTasks(meta)) {
        // A client that follows tasks: an upstream's task is handed over as a task of the store's, its id sealed.
        const seal = await this.sealOrUndefined()
        if (seal !== undefined) {
          const answer = await startOverMcp(this.ops.calls, this.store, scope, gate, { ...call, relay: declinedOnModern("call") }, x.signal)
          if (answer instanceof McpTaskStarted) return this.taskResult(caller, seal, answer)
          return modernCallResult(answer) as never
        }
      }
      if (x.turn === undefined) return modernCallResult(await callOverMcp(this.ops.calls, this.store, scope, gate, { ...call, relay: declinedOnModern("call") }, x.signal)) as never
      // A client that can answer: an upstream's request during the call is answered input_required, in rounds.
      const held = await heldCallOverMcp(this.ops.calls, this.store, scope, gate, call, caller, x.turn, x.signal).catch((e: unknown) => {
        throw retryRefused(e)
      })
      return roundResult(held, modernCallResult) as never
    } finally {
      unhear?.()
    }
  }

  /** The seal of task ids (made at the first use), or undefined when it cannot be had (logged; tasks are then followed by the store). */
  private async sealOrUndefined(): Promise<SessionSeal | undefined> {
    try {
      return await this.seal(true)
    } catch (e) {
      log.error(`MCP task ids cannot be sealed: ${e instanceof Error ? e.message : String(e)}; the store follows upstream tasks itself`, { event: "mcp_session_key_failed" })
      return undefined
    }
  }

  /**
   * The answer of a call whose upstream answered a task, for a client that follows it: the
   * upstream's task as it came, under a task id of the store's that seals whose it is (the caller's
   * scope and key), the service and the upstream's own id.
   */
  private taskResult(caller: ModernCaller, seal: SessionSeal, answer: McpTaskStarted): never {
    const { task, relay } = answer.started
    const holder = this.store.replication.replicaId
    const taskId = seal.sealTask({ scope: caller.scope, owner: caller.owner, service: answer.serviceName, upstreamTaskId: task.taskId, relay, ...(holder !== undefined ? { holder } : {}), issuedAt: Date.now() })
    return { ...task, taskId, resultType: "task" } as never
  }

  /**
   * A request of the tasks extension (tasks/get, tasks/update, tasks/cancel) on a task the store
   * handed out: checked (`Mcp-Name` is the task id, -32020 otherwise; the client declared the
   * extension, -32021 otherwise; the id opens and is the caller's, in its scope, else "not found"),
   * relayed to the upstream with its own task id, and answered with the upstream's answer under the
   * store's id. A `tasks/get` that shows the task ended records its call (src/runtime/task-relay.ts).
   */
  private async serveTask(caller: ModernCaller, req: IncomingMessage, res: ServerResponse, body: Record<string, unknown>): Promise<void> {
    const { id, method } = body as { id?: unknown; method: TaskMethod }
    if (typeof id !== "string" && typeof id !== "number") return jsonRpcError(res, 400, -32600, "Invalid Request: a task request needs an id")
    const params = isRecord(body["params"]) ? body["params"] : {}
    const taskId = params["taskId"]
    if (typeof taskId !== "string" || taskId.length > MAX_TASK_ID_LENGTH) return jsonRpcError(res, 200, -32602, `Invalid params: ${method} needs a taskId (a string)`, { id })
    if (headerOf(req, "mcp-name") !== taskId) {
      return jsonRpcError(res, 400, -32020, `Bad Request: the request headers and body disagree: the Mcp-Name header must be the body's params.taskId`, { id })
    }
    const meta = isRecord(params["_meta"]) ? params["_meta"] : undefined
    if (!takesTasks(meta)) return jsonRpcError(res, 200, MISSING_TASKS_CAPABILITY.code, MISSING_TASKS_CAPABILITY.message, { id, data: MISSING_TASKS_CAPABILITY.data })
    const answer = (message: Record<string, unknown>) => new CallResponse(res).answer({ jsonrpc: "2.0", id, ...message })
    const seal = await this.sealOrUndefined()
    const claims = seal?.openTask(taskId)
    if (claims === undefined || claims.owner !== caller.owner || scopeLabel(claims.scope) !== scopeLabel(caller.scope)) return answer({ error: TASK_NOT_FOUND })
    if (method === "tasks/update" && !isRecord(params["inputResponses"])) return answer({ error: { code: -32602, message: "Invalid params: tasks/update needs inputResponses (an object)" } })
    const upstream = { taskId: claims.upstreamTaskId, ...(method === "tasks/update" ? { inputResponses: params["inputResponses"] } : {}) }
    const abort = new AbortController()
    let finished = false
    res.once("close", () => {
      if (!finished) abort.abort()
    })
    // Gone while the request was checked: nothing to relay.
    if (res.destroyed) abort.abort()
    this.inflight.add(abort)
    let exit: Awaited<ReturnType<McpOperations["calls"]["relayTaskRequest"]>>
    try {
      // The caller's owner digest (the handle's, checked above): a `per_user` service's task is asked on the caller's own connection, as its call was.
      exit = await this.ops.calls.relayTaskRequest(scopeContext(this.store, caller.scope), claims.service, method, upstream, abort.signal, caller.span, claims.owner)
    } finally {
      this.inflight.delete(abort)
      finished = true
    }
    if (abort.signal.aborted) return new CallResponse(res).abandon()
    if (Exit.isFailure(exit)) {
      const failure = Cause.failureOption(exit.cause)
      const e = failure._tag === "Some" ? failure.value : undefined
      // The task's server answered with an error: its code, as it came.
      if (e?._tag === "UpstreamError" && e.code !== undefined && Number.isSafeInteger(e.code)) return answer({ error: { code: e.code, message: e.message } })
      // A `per_user` service's task asked without the caller's own credential (deleted since the call), its connections all in use, ...
      return answer({ error: e === undefined ? { code: -32603, message: "Internal error" } : rpcErrorOf(e) })
    }
    const result = exit.value
    if (method !== "tasks/get") return answer({ result: encodeCallResult({ resultType: "complete" }, serverInfoOf(caller.scope)) })
    // A hostile or broken upstream's completed task whose result is no tool result: an error, not a crash.
    if (result["status"] === "completed" && !isCallToolResult(result["result"])) {
      log.warn(`MCP 2026-07-28: the upstream of '${claims.service}' answered tasks/get with a completed task whose result is not a tool result`, { event: "mcp_task_malformed", service: claims.service })
      return answer({ error: { code: -32603, message: `Internal error: the server of '${claims.service}' answered tasks/get with a result that is not a tool result` } })
    }
    this.seen(claims.relay, claims.holder, result)
    // A completed task's `result` is the call's result as its tools/call would have answered it (the
    // extension: "the structure matches the result type of the original request"), `resultType` and
    // all: a 2026-07-28 result must carry it, and an upstream's inlined result may not.
    const completed =
      result["status"] === "completed" ? { result: encodeCallResult(modernCallResult(result["result"] as CallToolResult), serverInfoOf(caller.scope)) } : {}
    return answer({ result: encodeCallResult({ ...result, ...completed, taskId, resultType: "complete" }, serverInfoOf(caller.scope)) })
  }

  /**
   * A relayed answer showed a task: the store that handed it out records its call once it ended:
   * this one, or (replica mode) the replica the id names, told so (best effort: if it is gone, it
   * recorded the call at its stop).
   */
  private seen(relay: string, holder: string | undefined, task: Record<string, unknown>): void {
    const replication = this.store.replication
    if (holder === undefined || holder === replication.replicaId) return this.store.tasks.seen(relay, task)
    if (!taskEnded(task) || replication.taskEndedOn === undefined) return
    replication.taskEndedOn(holder, relay, task).catch((e: unknown) =>
      log.warn(`the end of a task could not be told to replica ${holder}, which handed it out: ${e instanceof Error ? e.message : String(e)}`, { event: "task_end_unsent" })
    )
  }

  /** A fresh SDK server for one request of `caller`: what its scope offers, as its key sees it. */
  private buildServer(caller: ModernCaller): Server {
    const { scope, gate, cacheScope } = caller
    const ctx = () => scopeContext(this.store, scope)
    const offers = this.ops.catalog.scopeCapabilities(ctx())
    const list: CacheHint = { ttlMs: LIST_TTL_MS, cacheScope }
    const server = mcpServer(scope, offers, {
      cacheHints: {
        "tools/list": list,
        "prompts/list": list,
        "resources/list": list,
        "resources/templates/list": list,
        // A read is the upstream's answer of the moment.
        "resources/read": { ttlMs: 0, cacheScope },
        // The scope's capabilities: the same for every key of the URL.
        "server/discover": { ttlMs: LIST_TTL_MS, cacheScope: "public" }
      }
    }, { [TASKS_EXTENSION]: {} })
    // Tracing on: the request's span is the parent of its upstream request's (method-spans.ts).
    const run = <A>(effect: Parameters<typeof runToPromise<A, unknown>>[0], signal: AbortSignal) =>
      runToPromise(underSpan(effect, caller.span), signal).catch((e: unknown) => {
        throw protocolErrorOf(e)
      })

    server.setRequestHandler("tools/list", async () => ({ tools: listedTools(this.store, scope, gate, caller.listing) }) as never)
    server.setRequestHandler("tools/call", (request, c) =>
      this.callTool(caller, {
        params: request.params as ModernToolCall["params"],
        envelope: c.mcpReq.envelope as Record<string, unknown> | undefined,
        turn: inputTurnOf(c),
        signal: c.mcpReq.signal,
        requestId: c.mcpReq.id,
        notify: (n) => c.mcpReq.notify(n as never)
      }) as never
    )
    /**
     * A read or a prompt, whose upstream may ask for input as a tool call's may: held for a client
     * that can answer (its round's `input_required`, taken back by its retry for the same
     * `subject`), declined for any other.
     */
    const withInput = async <A>(c: ServerContext, subject: string, what: string, request: (input: CatalogInput) => Effect.Effect<A, CatalogError>): Promise<A> => {
      const turn = inputTurnOf(c)
      // The caller's owner digest: a `per_user` service's read or prompt goes through its own connection.
      if (turn === undefined) return run(request({ relay: declinedOnModern(what), owner: caller.owner }), c.mcpReq.signal)
      const owner = { scope: ctx().label, owner: caller.owner, subject, keyed: caller.keyed }
      const spanned = caller.span === undefined ? request : (input: CatalogInput) => underSpan(request(input), caller.span)
      const held = await heldOverMcp(this.store, this.ops.catalog.heldCatalogRun(spanned, caller.owner), owner, turn, c.mcpReq.signal).catch((e: unknown) => {
        throw retryRefused(e)
      })
      return roundResult(held, (exit) => {
        if (Exit.isSuccess(exit)) return exit.value
        throw protocolErrorOf(Cause.squash(exit.cause))
      })
    }
    if (offers.resources) {
      server.setRequestHandler("resources/list", async () => ({ resources: mcpResources(this.ops.catalog, ctx()) }))
      server.setRequestHandler("resources/templates/list", async () => ({ resourceTemplates: mcpResourceTemplates(this.ops.catalog, ctx()) }))
      server.setRequestHandler("resources/read", (request, c) => {
        const uri = request.params.uri
        return withInput(c, `resources/read ${uri}`, "read", (input) => this.ops.catalog.readResource(ctx(), uri, input)) as never
      })
    }
    if (offers.prompts) {
      server.setRequestHandler("prompts/list", async () => ({ prompts: mcpPrompts(this.ops.catalog, ctx()) }))
      server.setRequestHandler("prompts/get", (request, c) => {
        const { name, arguments: args } = request.params
        return withInput(c, `prompts/get ${name}`, "prompt request", (input) => this.ops.catalog.getPrompt(ctx(), name, args ?? {}, input)) as never
      })
    }
    if (offers.completions) {
      server.setRequestHandler("completion/complete", (request, c) => run(this.ops.catalog.complete(ctx(), request.params as never, caller.owner), c.mcpReq.signal) as never)
    }
    return server
  }

  /** Shutdown has begun: refuse new modern requests and end every listen stream (gracefully: its final result). */
  shutdown(): void {
    this.closing = true
    this.listens.close().catch(() => undefined)
  }

  /** Ends everything (calls still in flight are aborted). */
  async close(): Promise<void> {
    this.closing = true
    this.unsubscribeMonitor()
    for (const call of this.inflight) call.abort()
    this.inflight.clear()
    await Promise.all([this.listens.close(), this.requests.close()].map((p) => p.catch(() => undefined)))
  }
}
