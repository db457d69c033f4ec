/**
 * The one protocol engine of an upstream MCP connection, and the seam to the MCP SDK. It owns the
 * whole conversation on a connected transport: the initialize handshake, request ids and their
 * answers, time-outs, progress (each restarting a call's time-out up to its total cap),
 * cancellation both ways (`notifications/cancelled`), the server's requests (ping, roots/list, and
 * the elicitation and sampling requests relayed to the caller of the request they belong to: a tool
 * call, a resource read or a prompt) and the server's notifications.
 *
 * Two eras: the 2025 one (the `initialize` handshake, `open`) and the modern one (2026-07-28: no
 * handshake, every request carrying the `_meta` envelope of its version, capabilities and client;
 * `discover` and `adopt`). Which one a server speaks is negotiated by src/mcp/connect.ts; the
 * 2025 era's requests cost what they did before the modern one was added (one branch, no allocation).
 *
 * Why not the SDK's `Client`: its per-request machinery cost 13 to 22 % more of the store's CPU per
 * tool call than this engine (zod parses of every message, closures and timers per request), and it
 * dispatches a progress a turn after it reads it, so a progress read with the answer was lost. SDK
 * v2 is used here for what does not cost per call: its types, its result schemas (lists,
 * resources, prompts, initialize; a tool result's common shape is checked by hand first) and its
 * error classes (`ProtocolError`, `SdkError`: ./protocol-error.ts), which the failure
 * classification reads. This module is the only one of src/mcp that speaks MCP messages.
 */
import {
  CompleteResultSchema,
  CreateMessageRequestSchema,
  CreateMessageResultSchema,
  CreateMessageResultWithToolsSchema,
  ElicitRequestSchema,
  ElicitResultSchema,
  EmptyResultSchema,
  GetPromptResultSchema,
  InitializeResultSchema,
  ListPromptsResultSchema,
  ListResourcesResultSchema,
  ListResourceTemplatesResultSchema,
  LoggingMessageNotificationSchema,
  ReadResourceResultSchema,
  ResourceUpdatedNotificationSchema
} from "@modelcontextprotocol/core"
import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from "@modelcontextprotocol/server"
import type {
  CallToolResult,
  ClientCapabilities,
  CompleteResult,
  GetPromptResult,
  JSONRPCMessage,
  JsonSchemaType,
  JsonSchemaValidator,
  JsonSchemaValidatorResult,
  jsonSchemaValidator,
  ListPromptsResult,
  ListResourcesResult,
  ListResourceTemplatesResult,
  ListToolsResult,
  LoggingLevel,
  LoggingMessageNotification,
  ReadResourceResult,
  ServerCapabilities,
  Transport
} from "@modelcontextprotocol/client"
import { ToolResultSchema, ToolsListSchema } from "./result-schemas.js"
import { answerError, connectionClosed, excerptOf, mcpError, ProtocolErrorCode, requestTimedOut, type ProtocolError } from "./protocol-error.js"
import { McpRequestError, RELAYED_METHODS, STORE_STOPPING, TASK_METHODS, TASKS_EXTENSION, UpstreamTask, type TaskMethod, type AnswerLost, type AnswerMalformed, type CallHooks, type CarriedBy, type CompleteParams } from "./types.js"
import { nestedDeeperThan } from "../domain/json-depth.js"
import { type CancelSignal } from "../domain/cancellation.js"
import { CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, LOG_LEVEL_META_KEY, PROTOCOL_VERSION_META_KEY, type DiscoverFacts } from "./era.js"

const MAX_TIMER_MS = 2_147_483_647

/** The longest progress message passed on (characters); an upstream's longer one is cut. */
const MAX_PROGRESS_MESSAGE = 4096
/** The deepest nesting of an upstream's message read (`nestedDeeperThan`): a JSON Schema or a structured result needs far less. */
const MAX_MESSAGE_DEPTH = 128
/** How long a close lets the cancellations under way leave before the transport is closed under them. */
const CLOSE_FLUSH_MS = 500

/** Upstream requests relayed to one call's caller and not answered yet, at most (more are declined). */
const MAX_RELAYED_PER_CALL = 64
/**
 * Requests of the server being handled at once, at most: past it one is dropped unanswered (a
 * server that floods requests and reads no answers holds one entry each, and their answers wait in
 * memory to be written).
 */
const MAX_SERVED = 256
/** A flood of the server's requests is reported at once, then at most this often (ms), with the count dropped since. */
export const FLOOD_REPORT_MS = 60_000

/** A request's time-out and signal, as the request wrapper (src/mcp/request.ts) hands them over. */
export interface Controls {
  readonly timeout: number
  readonly signal?: CancelSignal | undefined
}

/** What the connection hears of the session. */
export interface SessionEvents {
  /** A notification of the server (progress and cancellation aside), a turn after it was read. */
  readonly onNotification: (notification: SessionNotification) => void
  /** A transport error, or a message the engine could not place. */
  readonly onError: (error: Error) => void
  /** The transport closed (every request in flight has failed). */
  readonly onClose: () => void
}

/** The server's notifications the connection acts on. */
export type SessionNotification =
  | { readonly kind: "tools_changed" }
  | { readonly kind: "catalog_changed" }
  | { readonly kind: "resource_updated"; readonly uri: string }
  | { readonly kind: "log"; readonly params: LoggingMessageNotification["params"] }

export interface SessionOptions {
  readonly clientInfo: { readonly name: string; readonly version: string }
  /** The roots a definition lists: then the client declares `roots` and answers roots/list. */
  readonly roots?: ReadonlyArray<string> | undefined
  /** Checks the tools' output schemas. */
  readonly validator: jsonSchemaValidator
}

interface Pending {
  /** The request's method: a `ping` in flight at a close is failed, not cancelled (`abandon`). */
  readonly method: string
  readonly resolve: (result: unknown) => void
  readonly reject: (error: unknown) => void
  timer: NodeJS.Timeout
  readonly signal: CancelSignal | undefined
  readonly onAbort: (() => void) | undefined
  /** The caller's hooks (progress, relay), for a call that has them. */
  readonly hooks: CallHooks | undefined
  /** The time-out (ms) each progress restarts. */
  readonly timeoutMs: number
  /** performance.now() past which no progress restarts the time-out (the call's total cap). */
  readonly deadline: number
  /** Aborts the relayed upstream requests of the call when it settles (made at the first one). */
  relays?: AbortController
  /** The upstream requests relayed to the caller and not answered yet (at most MAX_RELAYED_PER_CALL). */
  relayed?: number
  /** A request whose `input_required` result (modern era) is answered (`withInput`), not declined: one of INPUT_METHODS. */
  readonly takesInput: boolean
  /**
   * What a modern server's `resultType: "task"` is to the request: a tool call's task handle, or
   * (read leniently, as some of the extension's examples write tasks/get's answer) a task request's
   * plain answer; undefined: a protocol error.
   */
  readonly taskResult: "handle" | "plain" | undefined
}

/**
 * The requests a server may answer `input_required` (2026-07-28, Multi Round-Trip Requests), and
 * that a 2025 server may send its own requests during: what they are to the caller told it cannot
 * answer. Any other request's `input_required` is declined.
 */
const INPUT_METHODS: ReadonlyMap<string, string> = new Map([
  ["tools/call", "tool call"],
  ["resources/read", "resource read"],
  ["prompts/get", "prompt request"]
])

/** A modern server's `input_required` result of one of INPUT_METHODS: its requests by key, and its state to echo. */
class InputRequired {
  constructor(
    readonly requests: ReadonlyArray<readonly [string, { readonly method: string; readonly params?: Record<string, unknown> }]>,
    readonly state: string | undefined
  ) {}
}

/** A task's states that end it. */
const TERMINAL: ReadonlySet<string> = new Set(["completed", "failed", "cancelled"])

/** How often a task is polled, whatever the server suggests (ms): never busier than MIN, never idler than MAX. */
const MIN_POLL_MS = 25
const MAX_POLL_MS = 5_000
/** The longest task id taken from a server (characters). */
const MAX_TASK_ID = 512
/** Input requests one task may ask for over its life before the store gives up on it. */
const MAX_TASK_INPUTS = 64

/** A server's task (a handle's or tasks/get's answer), checked for what driving it reads. */
const taskOf = (value: unknown, what: string): UpstreamTask["task"] => {
  if (isRecord(value) && typeof value["taskId"] === "string" && value["taskId"].length > 0 && value["taskId"].length <= MAX_TASK_ID && typeof value["status"] === "string") {
    return value as UpstreamTask["task"]
  }
  throw new McpRequestError("protocol", `${what}: the server's task has no taskId (at most ${MAX_TASK_ID} characters) or status`, ProtocolErrorCode.InvalidRequest)
}

/** Waits `ms`, or rejects with the signal's reason when it fires first. */
const pause = (ms: number, signal: CancelSignal | undefined): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal?.aborted === true) return reject(signal.reason)
    const onAbort = () => {
      clearTimeout(timer)
      reject(signal?.reason)
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort)
      resolve()
    }, ms)
    signal?.addEventListener("abort", onAbort, { once: true })
  })

/** A request's params with `meta` (the caller's trace context) in its `_meta`; as they are without. */
const withMeta = <P extends Record<string, unknown>>(params: P, meta: Readonly<Record<string, string>> | undefined): P =>
  meta === undefined ? params : { ...params, _meta: { ...(params["_meta"] as object | undefined), ...meta } }

/** A result's `_meta` without the protocol's reserved keys (`io.modelcontextprotocol/...`); undefined when nothing else is left. */
const ownMeta = (meta: Record<string, unknown>): Record<string, unknown> | undefined => {
  let era = 0
  let own = 0
  for (const key of Object.keys(meta)) {
    if (key.startsWith("io.modelcontextprotocol/")) era++
    else own++
  }
  if (own === 0) return undefined
  // A result's `_meta` is the parsed message's own object: with no era key it is kept as it is.
  if (era === 0) return meta
  // Object.fromEntries makes every key an own property, an own `__proto__` key included.
  return Object.fromEntries(Object.entries(meta).filter(([key]) => !key.startsWith("io.modelcontextprotocol/")))
}

/** Rounds of input one request may ask for before the store gives up on it. */
const MAX_INPUT_ROUNDS = 16
/** Input requests one round may carry. */
const MAX_INPUT_REQUESTS = 16

/** What a tool of the server asks of its calls, from tools/list. */
interface ToolTerms {
  readonly requiresTask: boolean
  readonly check: JsonSchemaValidator<unknown> | undefined
}

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value)

/** Keys of an object all among `allowed`. */
const onlyKeys = (value: Record<string, unknown>, allowed: ReadonlySet<string>): boolean => {
  for (const key in value) if (!allowed.has(key)) return false
  return true
}

const RESULT_KEYS: ReadonlySet<string> = new Set(["content", "structuredContent", "isError"])
const TEXT_KEYS: ReadonlySet<string> = new Set(["type", "text"])

/**
 * A tool result as `ToolResultSchema` reads it. The common shape (text blocks with nothing else, a
 * plain object of structured content without an own `__proto__` key, a boolean isError, no _meta)
 * is what the schema returns unchanged (content defaulting to []): checked by hand. Anything else
 * goes through the schema itself (which drops an own `__proto__` key).
 */
export const callToolResult = (value: unknown): CallToolResult => {
  if (isRecord(value) && onlyKeys(value, RESULT_KEYS)) {
    const { content, structuredContent, isError } = value
    const plain =
      (content === undefined || (Array.isArray(content) && content.every((c) => isRecord(c) && c["type"] === "text" && typeof c["text"] === "string" && onlyKeys(c, TEXT_KEYS)))) &&
      (structuredContent === undefined || (isRecord(structuredContent) && Object.getPrototypeOf(structuredContent) === Object.prototype && !Object.hasOwn(structuredContent, "__proto__"))) &&
      (isError === undefined || typeof isError === "boolean")
    if (plain) return (content === undefined ? { ...value, content: [] } : value) as CallToolResult
  }
  return ToolResultSchema.parse(value)
}

/** A ping's answer: an empty result (only `_meta` allowed, as EmptyResultSchema reads it). */
const emptyResult = (value: unknown): void => {
  if (isRecord(value) && Object.keys(value).length === 0) return
  EmptyResultSchema.parse(value)
}

/** An error as a JSON-RPC error answer carries it (as the SDK answers a failed handler). */
const errorBody = (error: unknown): { code: number; message: string; data?: unknown } => {
  const e = error as { code?: unknown; message?: unknown; data?: unknown }
  const code = typeof e?.code === "number" && Number.isSafeInteger(e.code) ? e.code : ProtocolErrorCode.InternalError
  const message = typeof e?.message === "string" ? e.message : "Internal error"
  return e?.data !== undefined ? { code, message, data: e.data } : { code, message }
}

/**
 * A failed task's error: the JSON-RPC error it carries (modern era; kept with its code and data, as
 * an error answer is), or its status message (2025-11-25's tasks carry none).
 */
const taskFailure = (task: Readonly<Record<string, unknown>>, modern: boolean): ProtocolError => {
  const error = task["error"]
  const message = typeof task["statusMessage"] === "string" ? task["statusMessage"] : undefined
  if (modern && isRecord(error) && typeof error["code"] === "number" && typeof error["message"] === "string") return answerError(error["code"], error["message"], error["data"])
  return mcpError(ProtocolErrorCode.InternalError, `the server's task failed${message === undefined ? "" : `: ${message}`}`)
}

/** A server answered the initialize handshake with a revision the store does not speak. */
export class UnsupportedVersionAnswer extends Error {
  constructor(
    readonly offered: string,
    readonly answered: string
  ) {
    super(`the server answered initialize (offered ${offered}) with protocol version ${answered}, which mcp-store does not speak`)
  }
}

/**
 * The server sent more requests than are handled at once (MAX_SERVED): the next ones are dropped
 * unanswered until some of the handled ones are answered. Reported at the first drop, then at most
 * every `FLOOD_REPORT_MS` with how many were dropped since (a server flooding on and on makes no
 * more lines than that).
 */
export class RequestFloodError extends Error {
  constructor(readonly droppedSince: number) {
    super(`the server sent more than ${MAX_SERVED} requests that are not answered yet: the next ones are dropped unanswered${droppedSince > 0 ? ` (${droppedSince} dropped since the last report)` : ""}`)
  }
}

/** One MCP client session on a transport: the connection's only protocol engine (see the module comment). */
export class Session {
  private next = 0
  private readonly pending = new Map<number, Pending>()
  private terms = new Map<string, ToolTerms>()
  /** The server's requests being handled, by id: aborted by its notifications/cancelled or the close. */
  private readonly handling = new Map<string | number, AbortController>()
  /** Upstream request id -> the id of the call it is tied to. */
  private readonly ties = new Map<string | number, number>()
  /** The last report of a flood of the server's requests (`serve`, MAX_SERVED), and the requests dropped since. */
  private flood: { reportedAt: number; dropped: number } | undefined
  private closed = false
  /** Cancellations being sent (notifications/cancelled): a close lets them leave first. */
  private readonly cancelling = new Set<Promise<void>>()
  serverCapabilities: ServerCapabilities | undefined
  serverInfo: { readonly name: string; readonly version: string } | undefined
  /** The protocol revision spoken, once the handshake (2025) or the discovery (modern) is done. */
  protocolVersion: string | undefined
  /** The modern era's `server/discover` result the session adopted. */
  discovery: DiscoverFacts | undefined
  /** The modern era's `_meta` of every request; undefined in the 2025 era (and before any era). */
  private envelope: Record<string, unknown> | undefined

  /** Takes the transport's messages, errors and close (the transport is not started yet). */
  constructor(
    private readonly transport: Transport,
    private readonly options: SessionOptions,
    private readonly events: SessionEvents
  ) {
    transport.onmessage = (message: JSONRPCMessage, extra?: unknown) => this.read(message, extra as Partial<CarriedBy & AnswerLost & AnswerMalformed> | undefined)
    transport.onerror = (error: Error) => events.onError(error)
    transport.onclose = () => this.onClosed()
  }

  private get capabilities(): ClientCapabilities {
    // elicitation and sampling: relayed to the client that made the call (`relay`).
    return { elicitation: {}, sampling: {}, ...(this.options.roots !== undefined ? { roots: { listChanged: false } } : {}) }
  }

  /** Starts the transport (before `open` or `discover`). */
  async start(): Promise<void> {
    await this.transport.start()
  }

  /**
   * The 2025 era's initialize handshake, offering `version` (the newest by default). A server that
   * answers with a revision the store does not speak (with `exact`: another than `version`) fails it
   * with `UnsupportedVersionAnswer`.
   */
  async open(controls: Controls, version: string = LATEST_PROTOCOL_VERSION, exact = false): Promise<void> {
    const result = InitializeResultSchema.parse(
      await this.request("initialize", { protocolVersion: version, capabilities: this.capabilities, clientInfo: this.options.clientInfo }, controls)
    )
    if (!SUPPORTED_PROTOCOL_VERSIONS.includes(result.protocolVersion) || (exact && result.protocolVersion !== version)) {
      throw new UnsupportedVersionAnswer(version, result.protocolVersion)
    }
    this.serverCapabilities = result.capabilities
    this.serverInfo = { name: result.serverInfo.name, version: result.serverInfo.version }
    this.protocolVersion = result.protocolVersion
    // The HTTP transports send it in a header of every request from now on.
    this.transport.setProtocolVersion?.(result.protocolVersion)
    await this.notify("notifications/initialized")
  }

  /**
   * `server/discover` with the modern envelope of `version` (the era probe, and the modern era's
   * health check): resolves with the raw result; rejects as every request does (a JSON-RPC error is
   * a `ProtocolError` with its code and data).
   */
  async discover(version: string, controls: Controls): Promise<unknown> {
    if (this.envelope !== undefined) return this.request("server/discover", undefined, controls)
    return this.request("server/discover", { _meta: this.envelopeOf(version) }, controls)
  }

  /**
   * Speaks the modern era at `version` from now on: every request carries its `_meta` envelope, the
   * server's capabilities and identity are those of its `server/discover` result (a fresh one, or one
   * remembered from an earlier connection).
   */
  adopt(version: string, discover: DiscoverFacts): void {
    this.envelope = this.envelopeOf(version)
    this.discovery = discover
    this.protocolVersion = version
    this.serverCapabilities = discover.capabilities as ServerCapabilities
    this.serverInfo = discover.serverInfo
    this.transport.setProtocolVersion?.(version)
  }

  /** Whether the session speaks the modern era. */
  get modern(): boolean {
    return this.envelope !== undefined
  }

  /** The `_meta` envelope of a modern request at `version`. */
  private envelopeOf(version: string): Record<string, unknown> {
    // The capabilities of the 2025 era: a server that needs input then says so with an
    // input_required result, answered through the call's caller (`callTool`).
    // The tasks extension: a tool call may be answered with a task handle, driven by `callTool`.
    const capabilities = { ...this.capabilities, extensions: { [TASKS_EXTENSION]: {} } }
    return { [PROTOCOL_VERSION_META_KEY]: version, [CLIENT_INFO_META_KEY]: this.options.clientInfo, [CLIENT_CAPABILITIES_META_KEY]: capabilities }
  }

  /**
   * `subscriptions/listen` (modern era): opens the server's stream of the change notifications of
   * `filter`, which arrive as the other notifications do. No time-out: it resolves when the server
   * ends the subscription, rejects when the stream breaks, the connection closes or `signal` fires
   * (the subscription is then cancelled as any request is).
   */
  listen(filter: Record<string, unknown>, signal?: CancelSignal): Promise<unknown> {
    return this.request("subscriptions/listen", { notifications: filter }, { timeout: MAX_TIMER_MS, signal })
  }

  /**
   * Gives up every request still in flight but a ping, the server told (`notifications/cancelled`) as it is
   * when a caller goes away, each caller failed as a close fails it; then lets the cancellations
   * under way leave, for up to CLOSE_FLUSH_MS. Before a close (and before a Streamable HTTP
   * session's DELETE): at a store's stop the callers' own aborts may reach the session only after
   * its close, and an upstream never told would go on with work nobody waits for.
   */
  abandon(): Promise<void> {
    // Once: a close after it (the connection's shutdown abandons before its session's DELETE) waits no more.
    return (this.abandoning ??= this.giveUp())
  }

  private abandoning: Promise<void> | undefined

  /**
   * Resolves once every request in flight now but health checks has ended (a hand-over lets them end
   * before it closes the connection); requests sent meanwhile are not waited for.
   */
  inFlightSettled(): Promise<void> {
    const ids = new Set<number>()
    for (const [id, entry] of this.pending) if (entry.method !== "ping") ids.add(id)
    if (ids.size === 0) return Promise.resolve()
    return new Promise((resolve) => this.settling.add({ ids, resolve }))
  }

  /** The waits of `inFlightSettled`: each the requests it still waits for. */
  private readonly settling = new Set<{ readonly ids: Set<number>; readonly resolve: () => void }>()

  private async giveUp(): Promise<void> {
    // Not before the session is up: a handshake that timed out has no caller to tell, and its close is not held up.
    if (this.protocolVersion === undefined) return
    // A ping has no work to stop: it fails with the close, as before.
    if (!this.closed) for (const [id, entry] of [...this.pending]) if (entry.method !== "ping") this.cancel(id, "the connection is closing", connectionClosed("Connection closed"))
    if (this.cancelling.size > 0) {
      let timer: NodeJS.Timeout | undefined
      await Promise.race([Promise.allSettled([...this.cancelling]), new Promise<void>((resolve) => (timer = setTimeout(resolve, CLOSE_FLUSH_MS)))])
      clearTimeout(timer)
    }
  }

  /** Closes the connection, its requests in flight given up first (`abandon`). */
  async close(): Promise<void> {
    await this.abandon()
    await this.transport.close()
  }

  /**
   * tools/call. With `hooks.onProgress` the request carries a `progressToken` (its own id) and each
   * progress restarts its time-out, up to `hooks.maxTotalMs`. A call the server answers with a task
   * (the tasks extension; a 2025 tool that requires tasks is called as one) is driven to its result
   * (`driveTask`). A tool with an output schema has its structured content checked. `meta` goes in
   * the request's `_meta`.
   */
  async callTool(name: string, args: Record<string, unknown>, controls: Controls, hooks?: CallHooks, meta?: Readonly<Record<string, string>>): Promise<CallToolResult> {
    return (await this.toolCall(name, args, controls, hooks, meta, false)) as CallToolResult
  }

  /**
   * tools/call for a caller that takes a modern server's task handle itself (a client that declared
   * the tasks extension): the handle is handed back as it came, to be followed with `taskRequest`.
   * Anything else is as `callTool`.
   */
  startToolCall(name: string, args: Record<string, unknown>, controls: Controls, hooks?: CallHooks, meta?: Readonly<Record<string, string>>): Promise<CallToolResult | UpstreamTask> {
    return this.toolCall(name, args, controls, hooks, meta, true)
  }

  private async toolCall(name: string, args: Record<string, unknown>, controls: Controls, hooks: CallHooks | undefined, meta: Readonly<Record<string, string>> | undefined, keepTask: boolean): Promise<CallToolResult | UpstreamTask> {
    const started = performance.now()
    const terms = this.terms.get(name)
    const call: Record<string, unknown> = meta === undefined ? { name, arguments: args } : { name, arguments: args, _meta: meta }
    let answer: unknown
    if (terms?.requiresTask === true && this.envelope === undefined) {
      // 2025-11-25's experimental tasks: asked for with `task`, answered `{task}`.
      const ttl = Math.min(hooks?.maxTotalMs ?? controls.timeout, MAX_TIMER_MS)
      const created = await this.request("tools/call", { ...call, task: { ttl: Math.ceil(ttl) } }, controls, hooks)
      answer = await this.driveTask(new UpstreamTask(taskOf(isRecord(created) ? created["task"] : undefined, "tools/call")), controls, hooks, started)
    } else {
      answer = await this.withInput("tools/call", call, controls, hooks)
      if (answer instanceof UpstreamTask) {
        if (keepTask) return answer
        answer = await this.driveTask(answer, controls, hooks, started)
      }
    }
    const result = callToolResult(answer)
    const check = terms?.check
    if (check === undefined) return result
    if (!result.structuredContent && !result.isError) {
      throw mcpError(ProtocolErrorCode.InvalidRequest, `Tool ${name} has an output schema but did not return structured content`)
    }
    if (result.structuredContent) {
      let outcome: JsonSchemaValidatorResult<unknown>
      try {
        outcome = check(result.structuredContent)
      } catch (error) {
        throw mcpError(ProtocolErrorCode.InvalidParams, `Failed to validate structured content: ${error instanceof Error ? error.message : String(error)}`)
      }
      if (!outcome.valid) throw mcpError(ProtocolErrorCode.InvalidParams, `Structured content does not match the tool's output schema: ${outcome.errorMessage}`)
    }
    return result
  }

  /**
   * Follows a server's task to its end, as a client that cannot take a task handle expects a tool
   * call to end: polled with tasks/get at the interval the server suggests (within MIN_POLL_MS and
   * MAX_POLL_MS); each change of its status or message is a progress of the call and restarts its
   * time-out (never past `hooks.maxTotalMs` from `started`). Its input requests are answered through
   * the caller, as a modern server's input_required rounds are, and sent with tasks/update, each
   * key once (2025-11-25: tasks/result, which carries the server's own requests and blocks until the
   * end). `completed` is the result; `failed` the server's JSON-RPC error; `cancelled` an error. A
   * caller that gives up (time-out, abort) has the task cancelled (tasks/cancel, not waited for).
   */
  private async driveTask(handle: UpstreamTask, controls: Controls, hooks: CallHooks | undefined, started: number): Promise<unknown> {
    const { taskId } = handle.task
    hooks?.onTask?.(taskId)
    const modern = this.envelope !== undefined
    const cap = started + (hooks?.maxTotalMs ?? controls.timeout)
    let deadline = Math.min(cap, performance.now() + controls.timeout)
    const left = (): Controls => ({ timeout: Math.max(0, deadline - performance.now()), signal: controls.signal })
    const answered = new Set<string>()
    let task: UpstreamTask["task"] = handle.task
    let seen: string | undefined
    let changes = 0
    try {
      for (;;) {
        const { status } = task
        const message = typeof task["statusMessage"] === "string" ? task["statusMessage"] : undefined
        if (`${status}\n${message ?? ""}` !== seen) {
          seen = `${status}\n${message ?? ""}`
          changes++
          deadline = Math.min(cap, performance.now() + controls.timeout)
          hooks?.onProgress?.({ progress: changes, message: message === undefined ? `task ${status}` : `task ${status}: ${message}` })
        }
        if (status === "failed") throw taskFailure(task, modern)
        if (status === "cancelled") throw mcpError(ProtocolErrorCode.InternalError, `the server cancelled the task${message === undefined ? "" : `: ${message}`}`)
        if (!modern && (status === "completed" || status === "input_required")) return await this.request("tasks/result", { taskId }, left(), hooks)
        if (status === "completed") {
          if (!isRecord(task["result"])) throw new McpRequestError("protocol", "tasks/get: the server's completed task has no result", ProtocolErrorCode.InvalidRequest)
          return task["result"]
        }
        if (status === "input_required") await this.answerTask(task, answered, hooks, left())
        else if (status !== "working") throw new McpRequestError("protocol", `tasks/get: the server's task has an unknown status ${excerptOf(status, 100)}`, ProtocolErrorCode.InvalidRequest)
        const suggested = task[modern ? "pollIntervalMs" : "pollInterval"]
        const wait = Math.min(Math.max(typeof suggested === "number" && suggested > 0 ? suggested : MIN_POLL_MS * 4, MIN_POLL_MS), MAX_POLL_MS)
        if (performance.now() + wait >= deadline) {
          await pause(Math.max(0, deadline - performance.now()), controls.signal)
          throw requestTimedOut(controls.timeout)
        }
        await pause(wait, controls.signal)
        task = taskOf(await this.request("tasks/get", { taskId }, left()), "tasks/get")
        if (task.taskId !== taskId) throw new McpRequestError("protocol", "tasks/get: the server answered with another task", ProtocolErrorCode.InvalidRequest)
      }
    } catch (error) {
      // A store that stops leaves the task to the caller that follows it again after the restart.
      const left = hooks?.onTask !== undefined && controls.signal?.aborted === true && controls.signal.reason === STORE_STOPPING
      if (!TERMINAL.has(task.status) && !this.closed && !left) {
        this.request("tasks/cancel", { taskId }, { timeout: MAX_POLL_MS }).catch(() => {})
      }
      throw error
    }
  }

  /** A modern task's input requests not answered yet: answered through the caller and sent with tasks/update. */
  private async answerTask(task: UpstreamTask["task"], answered: Set<string>, hooks: CallHooks | undefined, controls: Controls): Promise<void> {
    const requests = isRecord(task["inputRequests"]) ? Object.entries(task["inputRequests"]).filter(([key]) => !answered.has(key)) : []
    if (requests.length === 0) return
    const wellFormed = requests.every(([, r]) => isRecord(r) && typeof r["method"] === "string" && (r["params"] === undefined || isRecord(r["params"])))
    if (!wellFormed || requests.length > MAX_INPUT_REQUESTS || answered.size + requests.length > MAX_TASK_INPUTS) {
      throw new McpRequestError("protocol", `tasks/get: the server's input requests are not well formed (at most ${MAX_INPUT_REQUESTS} at once and ${MAX_TASK_INPUTS} per task, each with its method)`, ProtocolErrorCode.InvalidRequest)
    }
    const inputResponses = await this.inputResponses("tools/call", new InputRequired(requests as Array<[string, { method: string; params?: Record<string, unknown> }]>, undefined), hooks, controls)
    for (const [key] of requests) answered.add(key)
    emptyResult(await this.request("tasks/update", { taskId: task.taskId, inputResponses }, controls))
  }

  /**
   * Follows again a task of a tool call made earlier (before a restart of the store), from its
   * current state, as `callTool` follows one: the call's result. The tool's output schema is not
   * checked (the call was made by another connection).
   */
  async followTask(taskId: string, controls: Controls, hooks?: CallHooks): Promise<CallToolResult> {
    const started = performance.now()
    const task = taskOf(await this.request("tasks/get", { taskId }, controls), "tasks/get")
    return callToolResult(await this.driveTask(new UpstreamTask(task), controls, hooks, started))
  }

  /**
   * A request of the tasks extension on a task of this server (tasks/get, tasks/update,
   * tasks/cancel), relayed for a client that follows the task itself: the server's answer as it
   * came (less `resultType`), or its JSON-RPC error.
   */
  async taskRequest(method: TaskMethod, params: Record<string, unknown>, controls: Controls, meta?: Readonly<Record<string, string>>): Promise<Record<string, unknown>> {
    const answer = await this.request(method, withMeta(params, meta), controls)
    if (!isRecord(answer)) throw new McpRequestError("protocol", `${method}: the server's answer is not an object`, ProtocolErrorCode.InvalidRequest)
    return answer
  }

  /** The health check: ping (2025 era) or server/discover (modern era, which has no ping). */
  async ping(controls: Controls): Promise<void> {
    if (this.envelope !== undefined) {
      const result = await this.request("server/discover", undefined, controls)
      if (!isRecord(result) || !Array.isArray(result["supportedVersions"])) throw new McpRequestError("protocol", "server/discover: the answer has no supportedVersions")
      return
    }
    emptyResult(await this.request("ping", undefined, controls))
  }

  /** One page of tools/list; `setTools` takes the whole list's terms once every page is in. */
  async listTools(params: { cursor?: string }, controls: Controls): Promise<ListToolsResult> {
    return ToolsListSchema.parse(await this.request("tools/list", params, controls))
  }

  /** The tools' terms (task support, output schema) from the whole tools/list. */
  setTools(tools: ReadonlyArray<ListToolsResult["tools"][number]>): void {
    this.terms = new Map(
      tools.map((tool) => [
        tool.name,
        {
          requiresTask: tool.execution?.taskSupport === "required",
          check: tool.outputSchema !== undefined ? this.options.validator.getValidator(tool.outputSchema as JsonSchemaType) : undefined
        }
      ])
    )
  }

  async listResources(params: { cursor?: string }, controls: Controls): Promise<ListResourcesResult> {
    return ListResourcesResultSchema.parse(await this.request("resources/list", params, controls))
  }

  async listResourceTemplates(params: { cursor?: string }, controls: Controls): Promise<ListResourceTemplatesResult> {
    return ListResourceTemplatesResultSchema.parse(await this.request("resources/templates/list", params, controls))
  }

  async listPrompts(params: { cursor?: string }, controls: Controls): Promise<ListPromptsResult> {
    return ListPromptsResultSchema.parse(await this.request("prompts/list", params, controls))
  }

  /** resources/read; the server's requests for input during it go to `hooks.relay`, as a tool call's do. */
  async readResource(uri: string, controls: Controls, hooks?: CallHooks, meta?: Readonly<Record<string, string>>): Promise<ReadResourceResult> {
    return ReadResourceResultSchema.parse(await this.withInput("resources/read", withMeta({ uri }, meta), controls, hooks))
  }

  /** prompts/get; input as for readResource. */
  async getPrompt(name: string, args: Record<string, string>, controls: Controls, hooks?: CallHooks, meta?: Readonly<Record<string, string>>): Promise<GetPromptResult> {
    return GetPromptResultSchema.parse(await this.withInput("prompts/get", withMeta({ name, arguments: args }, meta), controls, hooks))
  }

  /**
   * One request of INPUT_METHODS, and its rounds of input: a modern server that needs input
   * (Multi Round-Trip Requests) has each request of the round answered through the caller, as a 2025
   * server's own request is (`serve`), and the request sent again with the answers and the
   * server's state, all within the request's time-out, for at most MAX_INPUT_ROUNDS rounds.
   */
  private async withInput(method: string, params: Record<string, unknown>, controls: Controls, hooks: CallHooks | undefined): Promise<unknown> {
    const started = performance.now()
    const left = (): Controls => ({ timeout: Math.max(0, controls.timeout - (performance.now() - started)), signal: controls.signal })
    // The call's total cap counts from its first request, whatever the rounds: progress never carries a later round past it.
    const hooksLeft = (): CallHooks | undefined =>
      hooks?.maxTotalMs === undefined ? hooks : { ...hooks, maxTotalMs: Math.max(0, hooks.maxTotalMs - (performance.now() - started)) }
    let answer = await this.request(method, params, controls, hooks)
    for (let round = 1; answer instanceof InputRequired; round++) {
      if (round > MAX_INPUT_ROUNDS) throw new McpRequestError("protocol", `the server asked for input more than ${MAX_INPUT_ROUNDS} times in one ${INPUT_METHODS.get(method)}`, ProtocolErrorCode.InvalidRequest)
      const inputResponses = await this.inputResponses(method, answer, hooks, left())
      answer = await this.request(method, { ...params, inputResponses, ...(answer.state === undefined ? {} : { requestState: answer.state }) }, left(), hooksLeft())
    }
    return answer
  }

  async complete(params: CompleteParams, controls: Controls, meta?: Readonly<Record<string, string>>): Promise<CompleteResult> {
    return CompleteResultSchema.parse(await this.request("completion/complete", withMeta(params, meta), controls))
  }

  async subscribeResource(uri: string, controls: Controls): Promise<void> {
    emptyResult(await this.request("resources/subscribe", { uri }, controls))
  }

  async unsubscribeResource(uri: string, controls: Controls): Promise<void> {
    emptyResult(await this.request("resources/unsubscribe", { uri }, controls))
  }

  /**
   * logging/setLevel; the modern era has none: the level goes in the `_meta` of every request from
   * now on (a server sends log messages only for requests that carry one).
   */
  async setLoggingLevel(level: LoggingLevel, controls: Controls): Promise<void> {
    if (this.envelope !== undefined) {
      this.envelope = { ...this.envelope, [LOG_LEVEL_META_KEY]: level }
      return
    }
    emptyResult(await this.request("logging/setLevel", { level }, controls))
  }

  /**
   * One request: resolves with its `result`; rejects with a `ProtocolError` for a JSON-RPC error, an
   * `SdkError` for a time-out (`RequestTimeout`, after `notifications/cancelled`) or a closed
   * connection (`ConnectionClosed`), with the signal's reason when the caller aborts, or with the transport's
   * send error.
   */
  private request(method: string, params: Record<string, unknown> | undefined, controls: Controls, hooks?: CallHooks): Promise<unknown> {
    const { signal } = controls
    if (signal?.aborted === true) return Promise.reject(signal.reason)
    if (this.closed) return Promise.reject(new Error("Not connected"))
    return new Promise((resolve, reject) => {
      const id = this.next++
      const timeout = Math.max(0, Math.min(controls.timeout, MAX_TIMER_MS))
      const onAbort = signal === undefined ? undefined : () => this.cancel(id, signal.reason, signal.reason)
      const timer = setTimeout(() => this.timedOut(id), timeout)
      const deadline = hooks?.maxTotalMs === undefined ? performance.now() + timeout : performance.now() + hooks.maxTotalMs
      this.pending.set(id, { method, resolve, reject, timer, signal, onAbort, hooks, timeoutMs: timeout, deadline, takesInput: INPUT_METHODS.has(method), taskResult: method === "tools/call" ? "handle" : TASK_METHODS.has(method) ? "plain" : undefined })
      if (onAbort !== undefined) signal?.addEventListener("abort", onAbort, { once: true })
      let sent = hooks?.onProgress === undefined || params === undefined ? params : { ...params, _meta: { ...(params["_meta"] as object | undefined), progressToken: id } }
      // The modern era: every request carries the envelope (beside its progress token and trace context).
      if (this.envelope !== undefined) sent = { ...sent, _meta: sent?.["_meta"] === undefined ? this.envelope : { ...this.envelope, ...(sent["_meta"] as object) } }
      const message = (sent === undefined ? { jsonrpc: "2.0", id, method } : { jsonrpc: "2.0", id, method, params: sent }) as JSONRPCMessage
      this.transport.send(message).catch((error: unknown) => this.settle(id)?.reject(error))
    })
  }

  private async notify(method: string): Promise<void> {
    if (this.closed) throw new Error("Not connected")
    await this.transport.send({ jsonrpc: "2.0", method })
  }

  /** Every message the transport reads. */
  private read(message: JSONRPCMessage, extra: Partial<CarriedBy & AnswerLost & AnswerMalformed> | undefined): void {
    const { id, method, params } = message as { id?: unknown; method?: unknown; params?: unknown }
    const withId = typeof id === "string" || typeof id === "number"
    // Nested deeper than anything of the protocol needs: read no further (writing it out again, as
    // an answer, a record or a log line, would throw). An answer fails its request; anything else is dropped.
    if (nestedDeeperThan(message, MAX_MESSAGE_DEPTH)) {
      const problem = `the server sent a message nested deeper than ${MAX_MESSAGE_DEPTH} levels`
      if (withId && typeof method !== "string") this.settle(id as number)?.reject(new McpRequestError("protocol", problem))
      else this.events.onError(new Error(`${problem}: dropped`))
      return
    }
    if (typeof method === "string") {
      if (withId) this.serve(id, method, isRecord(params) ? params : undefined, extra)
      else this.notified(method, isRecord(params) ? params : undefined)
    } else if (withId) {
      this.answer(id, message, extra)
    } else {
      this.events.onError(new Error(`Unknown message type: ${excerptOf(message, 200)}`))
    }
  }

  private timedOut(id: number): void {
    const timeout = this.pending.get(id)?.timeoutMs
    this.cancel(id, "Request timed out", requestTimedOut(timeout))
  }

  /**
   * A notification: a progress of one of its calls restarts the call's time-out (never past its
   * deadline) and the caller hears of it at once (a progress for a call already settled, or
   * malformed, is dropped); a cancellation aborts the server's request it names; the others go to
   * the connection a turn later, checked against their schemas.
   */
  private notified(method: string, params: Record<string, unknown> | undefined): void {
    if (method === "notifications/progress") return this.progress(params)
    if (method === "notifications/cancelled") {
      const requestId = params?.["requestId"]
      if (typeof requestId === "string" || typeof requestId === "number") this.handling.get(requestId)?.abort(params?.["reason"])
      // The modern era: a server ends a subscriptions/listen of ours so (no answer follows); any
      // other request of ours it names is not its to cancel (its own requests' ids are another space).
      if (this.envelope !== undefined && typeof requestId === "number" && this.pending.get(requestId)?.method === "subscriptions/listen") {
        this.settle(requestId)?.reject(connectionClosed("Request was cancelled"))
      }
      return
    }
    let notification: SessionNotification | undefined
    if (method === "notifications/tools/list_changed") notification = { kind: "tools_changed" }
    else if (method === "notifications/resources/list_changed" || method === "notifications/prompts/list_changed") notification = { kind: "catalog_changed" }
    else if (method === "notifications/resources/updated") {
      const parsed = ResourceUpdatedNotificationSchema.safeParse({ method, params })
      if (parsed.success) notification = { kind: "resource_updated", uri: parsed.data.params.uri }
    } else if (method === "notifications/message") {
      const parsed = LoggingMessageNotificationSchema.safeParse({ method, params })
      if (parsed.success) notification = { kind: "log", params: parsed.data.params }
    }
    if (notification === undefined) return
    const heard = notification
    queueMicrotask(() => {
      try {
        this.events.onNotification(heard)
      } catch (error) {
        this.events.onError(new Error(`Uncaught error in notification handler: ${String(error)}`))
      }
    })
  }

  private progress(params: Record<string, unknown> | undefined): void {
    const token = params?.["progressToken"]
    if (typeof token !== "number") return
    const entry = this.pending.get(token)
    const onProgress = entry?.hooks?.onProgress
    if (entry === undefined || onProgress === undefined || params === undefined) return
    const { progress, total, message: text } = params
    if (typeof progress !== "number") return
    const left = entry.deadline - performance.now()
    if (left >= entry.timeoutMs) entry.timer.refresh()
    else {
      clearTimeout(entry.timer)
      entry.timer = setTimeout(() => this.timedOut(token), Math.max(0, left))
    }
    onProgress({
      progress,
      ...(typeof total === "number" ? { total } : {}),
      // Cut to a length a progress line needs: several wait in order per call (the MCP faces keep 16).
      ...(typeof text === "string" ? { message: text.length > MAX_PROGRESS_MESSAGE ? `${text.slice(0, MAX_PROGRESS_MESSAGE)}...` : text } : {})
    })
  }

  /**
   * A request of the server: ping is answered, roots/list from the definition's roots, elicitation
   * and sampling through the caller of the request they are tied to (`relay`); any other is refused
   * (method not found). A request the server cancels gets no answer.
   */
  private serve(id: string | number, method: string, params: Record<string, unknown> | undefined, extra: Partial<CarriedBy> | undefined): void {
    if (this.handling.size >= MAX_SERVED) {
      const now = performance.now()
      if (this.flood === undefined || now - this.flood.reportedAt >= FLOOD_REPORT_MS) {
        this.events.onError(new RequestFloodError(this.flood?.dropped ?? 0))
        this.flood = { reportedAt: now, dropped: 0 }
      } else this.flood.dropped += 1
      return
    }
    if (RELAYED_METHODS.has(method)) this.tie(id, extra)
    const controller = new AbortController()
    this.handling.set(id, controller)
    this.handle(method, params, (request) => this.relay(id, request, controller.signal))
      .then(
        (result) => (controller.signal.aborted ? undefined : this.transport.send({ jsonrpc: "2.0", id, result } as JSONRPCMessage)),
        (error: unknown) => (controller.signal.aborted ? undefined : this.transport.send({ jsonrpc: "2.0", id, error: errorBody(error) } as JSONRPCMessage))
      )
      .catch((error: unknown) => this.events.onError(new Error(`Failed to send response: ${String(error)}`)))
      .finally(() => {
        if (this.handling.get(id) === controller) this.handling.delete(id)
        this.ties.delete(id)
      })
  }

  private async handle(
    method: string,
    params: Record<string, unknown> | undefined,
    ask: (request: { method: string; params?: Record<string, unknown> }) => Promise<Record<string, unknown>>
  ): Promise<Record<string, unknown>> {
    const roots = this.options.roots
    if (method === "ping") return {}
    if (method === "roots/list" && roots !== undefined) return { roots: roots.map((uri) => ({ uri })) }
    if (method === "elicitation/create") {
      const request = ElicitRequestSchema.safeParse({ method, params })
      if (!request.success) throw mcpError(ProtocolErrorCode.InvalidParams, `Invalid elicitation request: ${request.error.message}`)
      if ((request.data.params.mode ?? "form") !== "form") throw mcpError(ProtocolErrorCode.InvalidParams, "Client does not support URL-mode elicitation requests")
      const result = ElicitResultSchema.safeParse(await ask(request.data))
      if (!result.success) throw mcpError(ProtocolErrorCode.InvalidParams, `Invalid elicitation result: ${result.error.message}`)
      return result.data
    }
    if (method === "sampling/createMessage") {
      const request = CreateMessageRequestSchema.safeParse({ method, params })
      if (!request.success) throw mcpError(ProtocolErrorCode.InvalidParams, `Invalid sampling request: ${request.error.message}`)
      const withTools = request.data.params.tools !== undefined || request.data.params.toolChoice !== undefined
      const answer = await ask(request.data)
      const result = withTools ? CreateMessageResultWithToolsSchema.safeParse(answer) : CreateMessageResultSchema.safeParse(answer)
      if (!result.success) throw mcpError(ProtocolErrorCode.InvalidParams, `Invalid sampling result: ${result.error.message}`)
      return result.data
    }
    throw mcpError(ProtocolErrorCode.MethodNotFound, "Method not found")
  }

  /**
   * Ties an upstream request to the call it belongs to (a request in flight with hooks: a tool call,
   * a resource read, a prompt): the one whose stream carried it (Streamable HTTP tells), or else the
   * only one in flight on the connection (stdio, SSE). Untied: declined.
   */
  private tie(requestId: string | number, extra: Partial<CarriedBy> | undefined): void {
    let call: number | undefined
    if (extra?.carriedBy !== undefined) {
      for (const id of extra.carriedBy) if (typeof id === "number" && this.pending.get(id)?.hooks !== undefined) call = id
    } else {
      for (const [id, entry] of this.pending) {
        if (entry.hooks === undefined) continue
        if (call !== undefined) return // several calls in flight: whose it is cannot be told
        call = id
      }
    }
    if (call !== undefined) this.ties.set(requestId, call)
  }

  /**
   * The answers of one round of a modern server's input requests, by key, each obtained as a 2025
   * server's request is (`handle`: roots from the definition, elicitation and sampling through the
   * caller's relay), all within `controls`; the first that fails fails the request (`method`).
   */
  private async inputResponses(method: string, input: InputRequired, hooks: CallHooks | undefined, controls: Controls): Promise<Record<string, unknown>> {
    const aborts = new AbortController()
    const onAbort = () => aborts.abort(controls.signal?.reason)
    controls.signal?.addEventListener("abort", onAbort, { once: true })
    const timer = setTimeout(() => aborts.abort(requestTimedOut(controls.timeout)), Math.min(controls.timeout, MAX_TIMER_MS))
    const relay = hooks?.relay
    const ask = (request: { method: string; params?: Record<string, unknown> }) =>
      relay === undefined
        ? Promise.reject(mcpError(ProtocolErrorCode.InvalidRequest, `mcp-store declined ${request.method}: the caller of this ${INPUT_METHODS.get(method)} cannot answer it`))
        : relay(request, { signal: aborts.signal, timeoutMs: controls.timeout })
    const aborted = new Promise<never>((_, reject) => aborts.signal.addEventListener("abort", () => reject(aborts.signal.reason), { once: true }))
    try {
      const answers = await Promise.race([Promise.all(input.requests.map(async ([key, request]) => [key, await this.handle(request.method, request.params, ask)] as const)), aborted])
      return Object.fromEntries(answers)
    } finally {
      clearTimeout(timer)
      aborts.abort()
      controls.signal?.removeEventListener("abort", onAbort)
    }
  }

  /**
   * Answers an upstream request (elicitation, sampling) through the caller of the call it is tied
   * to (a tool call, resource read or prompt), within the call's time left; aborted when the
   * upstream cancels it or the call ends. Declined (a `ProtocolError`) when it is tied to no call in
   * flight or the caller cannot answer it.
   */
  private async relay(requestId: string | number, request: { method: string; params?: Record<string, unknown> }, signal: AbortSignal): Promise<Record<string, unknown>> {
    const call = this.ties.get(requestId)
    this.ties.delete(requestId)
    const entry = call === undefined ? undefined : this.pending.get(call)
    if (entry === undefined) throw mcpError(ProtocolErrorCode.InvalidRequest, `mcp-store declined ${request.method}: it is not tied to a tool call, resource read or prompt request in flight`)
    const relay = entry.hooks?.relay
    if (relay === undefined) throw mcpError(ProtocolErrorCode.InvalidRequest, `mcp-store declined ${request.method}: the caller of this request cannot answer it`)
    if ((entry.relayed ?? 0) >= MAX_RELAYED_PER_CALL) {
      throw mcpError(ProtocolErrorCode.InvalidRequest, `mcp-store declined ${request.method}: ${MAX_RELAYED_PER_CALL} requests of this call are waiting for its caller already`)
    }
    entry.relays ??= new AbortController()
    entry.relayed = (entry.relayed ?? 0) + 1
    try {
      return await relay(request, { signal: AbortSignal.any([signal, entry.relays.signal]), timeoutMs: Math.max(0, entry.deadline - performance.now()) })
    } finally {
      entry.relayed -= 1
    }
  }

  /** Takes a request off the books: its timer and abort listener go. */
  private settle(id: number): Pending | undefined {
    const entry = this.pending.get(id)
    if (entry === undefined) return undefined
    this.pending.delete(id)
    for (const wait of this.settling) {
      if (wait.ids.delete(id) && wait.ids.size === 0) {
        this.settling.delete(wait)
        wait.resolve()
      }
    }
    clearTimeout(entry.timer)
    entry.relays?.abort(new Error("the tool call ended"))
    if (this.ties.size > 0) for (const [request, call] of this.ties) if (call === id) this.ties.delete(request)
    if (entry.onAbort !== undefined) entry.signal?.removeEventListener("abort", entry.onAbort)
    return entry
  }

  /** Gives a request up (time-out, abort): the server is told with `notifications/cancelled`. */
  private cancel(id: number, reason: unknown, error: unknown): void {
    const entry = this.settle(id)
    if (entry === undefined) return
    const sent = this.transport
      .send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: id, reason: String(reason) } })
      .catch((e: unknown) => this.events.onError(new Error(`Failed to send cancellation: ${String(e)}`)))
    this.cancelling.add(sent)
    void sent.finally(() => this.cancelling.delete(sent))
    entry.reject(error)
  }

  private answer(id: string | number, message: JSONRPCMessage, extra: Partial<AnswerLost & AnswerMalformed> | undefined): void {
    const entry = this.settle(typeof id === "number" ? id : Number(id))
    if (entry === undefined) return // answered after its time-out or abort, or never asked: dropped
    if (extra?.lost === true) return entry.reject(connectionClosed("Connection closed"))
    if (extra?.malformed !== undefined) return entry.reject(new McpRequestError("protocol", `the server's answer is not a valid message: ${extra.malformed}`))
    const m = message as { result?: unknown; error?: { code?: unknown; message?: unknown; data?: unknown } }
    if ("result" in m) {
      if (this.envelope !== undefined) return this.modernResult(entry, m.result)
      entry.resolve(m.result)
      return
    }
    const error = m.error
    if (isRecord(error) && typeof error.code === "number" && typeof error.message === "string") {
      entry.reject(answerError(error.code, error.message, error.data))
    } else {
      entry.reject(new McpRequestError("protocol", `the server answered with a message that is neither a result nor an error: ${excerptOf(message, 200)}`))
    }
  }

  /**
   * A modern result: `resultType` "complete" (or absent, as a lenient reading) is the answer, taken
   * off it so that results look the same in both eras; "input_required" (the server asks the client
   * for elicitation, sampling or roots before it completes: Multi Round-Trip Requests) of a tool
   * call, resource read or prompt is handed to `withInput`, which answers it, and of any other
   * request declined; anything else is a protocol error.
   */
  private modernResult(entry: Pending, result: unknown): void {
    if (!isRecord(result)) return entry.resolve(result)
    const type = result["resultType"]
    if (type === undefined) return entry.resolve(result)
    if (type === "complete") {
      const { resultType: _, _meta: meta, ...rest } = result
      // The era's own keys of `_meta` (the server's identity on every result) are the connection's,
      // not the result's: taken off, so a result looks as a 2025 server's does.
      const own = isRecord(meta) ? ownMeta(meta) : meta
      return entry.resolve(own === undefined ? rest : { ...rest, _meta: own })
    }
    if (type === "task" && entry.taskResult !== undefined) {
      const { resultType: _, _meta: _meta, ...task } = result
      if (entry.taskResult === "plain") return entry.resolve(task)
      try {
        return entry.resolve(new UpstreamTask(taskOf(task, "tools/call")))
      } catch (error) {
        return entry.reject(error)
      }
    }
    if (type === "input_required" && entry.takesInput) {
      const requests = isRecord(result["inputRequests"]) ? Object.entries(result["inputRequests"]) : []
      const state = result["requestState"]
      const wellFormed = requests.every(([, r]) => isRecord(r) && typeof r["method"] === "string" && (r["params"] === undefined || isRecord(r["params"])))
      if (wellFormed && requests.length <= MAX_INPUT_REQUESTS && (requests.length > 0 || typeof state === "string") && (state === undefined || typeof state === "string")) {
        return entry.resolve(new InputRequired(requests as Array<[string, { method: string; params?: Record<string, unknown> }]>, state))
      }
      return entry.reject(new McpRequestError("protocol", `the server answered input_required with requests that are not well formed (at most ${MAX_INPUT_REQUESTS}, each with its method)`, ProtocolErrorCode.InvalidRequest))
    }
    if (type === "input_required") {
      const requests = isRecord(result["inputRequests"]) ? Object.values(result["inputRequests"]) : []
      const methods = [...new Set(requests.map((r) => (isRecord(r) && typeof r["method"] === "string" ? r["method"] : "?")))]
      return entry.reject(
        new McpRequestError(
          "protocol",
          `the server asks for input before it completes (input_required${methods.length > 0 ? `: ${methods.join(", ")}` : ""}); mcp-store answers input requests of tools/call, resources/read and prompts/get only, so it declined`,
          ProtocolErrorCode.InvalidRequest
        )
      )
    }
    entry.reject(new McpRequestError("protocol", `the server answered with an unknown resultType ${excerptOf(type, 100)}`))
  }

  private onClosed(): void {
    if (this.closed) return
    this.closed = true
    const error = connectionClosed("Connection closed")
    for (const id of [...this.pending.keys()]) this.settle(id)?.reject(error)
    for (const controller of this.handling.values()) controller.abort()
    this.handling.clear()
    this.events.onClose()
  }
}
