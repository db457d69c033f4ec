/**
 * The requests of the store's hot paths (tools/call, ping), sent beside the SDK's Client on the
 * same transport. The Client stays the owner of the connection (initialize, tools/list,
 * notifications, server requests); these two skip its per-request machinery, which for a call cost
 * more than the call's whole transport work: a zod parse of the answer three times over (the
 * message, its kind, the result), an AbortSignal and a timer of its own besides the caller's, and
 * the tool-output checks looked up per call.
 *
 * What stays the same: the JSON-RPC request on the wire, the time-out (then
 * `notifications/cancelled`, as the SDK sends it), cancellation by the caller's signal (the same
 * notification), the failures the SDK would reject with (`McpError` for a JSON-RPC error, a
 * closed connection and a time-out; the transport's own send errors), and the result's check: an
 * answer of the common shape (text content, structured content, isError) is checked by hand,
 * anything else by the SDK's own result schema, so every answer is accepted or refused exactly as
 * the SDK would, and a tool with an output schema has its structured content checked.
 *
 * Request ids are strings with a prefix of their own, so they never meet the Client's numeric ids.
 */
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js"
import {
  CallToolResultSchema,
  EmptyResultSchema,
  ErrorCode,
  McpError,
  type CallToolResult,
  type JSONRPCMessage
} from "@modelcontextprotocol/sdk/types.js"
import type { JsonSchemaType, JsonSchemaValidator, JsonSchemaValidatorResult, jsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/types.js"
import { McpRequestError, RELAYED_METHODS, type CallHooks, type CancelSignal, type CarriedBy } from "./types.js"

const ID_PREFIX = "mcp-store:"

const MAX_TIMER_MS = 2_147_483_647

interface Pending {
  readonly resolve: (result: unknown) => void
  readonly reject: (error: unknown) => void
  timer: NodeJS.Timeout
  readonly signal: CancelSignal | undefined
  readonly onAbort: (() => void) | undefined
  /** The caller's hooks (progress), for a call that has them. */
  readonly hooks: CallHooks | undefined
  /** The time-out (ms) each progress restarts. */
  readonly timeoutMs: number
  /** performance.now() past which no progress restarts the time-out (the call's total cap). */
  readonly deadline: number
  /** Aborts the relayed upstream requests of the call when it settles (made at the first one). */
  relays?: AbortController
}

/** Upstream requests tied to calls and not handled yet, at most (more are not tied: declined). */
const MAX_TIES = 64

/** What a tool of the server asks of its calls, from tools/list. */
export interface ToolTerms {
  /** Its output schema, when it has one: structured content is checked against it. */
  readonly outputSchema?: JsonSchemaType | undefined
  /** `execution.taskSupport`: a tool that requires task-based execution cannot be called here. */
  readonly taskSupport?: string | undefined
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
 * A tool result as the SDK's CallToolResultSchema reads it. The common shape (text blocks with
 * nothing else, a plain object of structured content without an own `__proto__` key, a boolean
 * isError, no _meta) is what the schema returns unchanged (content defaulting to []): checked by
 * hand. Anything else goes through the schema itself (which drops an own `__proto__` key).
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
  return CallToolResultSchema.parse(value)
}

/** A ping's answer: an empty result (only `_meta` allowed, as EmptyResultSchema reads it). */
const emptyResult = (value: unknown): void => {
  if (isRecord(value) && Object.keys(value).length === 0) return
  EmptyResultSchema.parse(value)
}

/** Requests sent on a connected transport beside the SDK's Client (see the module comment). */
export class DirectRequests {
  private next = 0
  private readonly pending = new Map<string, Pending>()
  private readonly terms = new Map<string, { readonly requiresTask: boolean; readonly check: JsonSchemaValidator<unknown> | undefined }>()

  /**
   * Takes the answers to its own requests off `transport` (the SDK's Client has connected it and
   * keeps every other message) and fails them when the transport closes.
   */
  constructor(
    private readonly transport: Transport,
    private readonly validator: jsonSchemaValidator
  ) {
    const client = transport.onmessage
    transport.onmessage = (message: JSONRPCMessage, extra?: unknown) => {
      const id = (message as { id?: unknown }).id
      if (typeof id === "string" && id.startsWith(ID_PREFIX) && !("method" in message)) return this.answer(id, message)
      const method = (message as { method?: unknown }).method
      // A progress of one of its calls (its token is the request's id): the Client never sees it.
      if (method === "notifications/progress" && this.progress(message)) return
      // An elicitation or sampling request: tied to its call here, answered by the Client's handler (`relay`).
      if (typeof method === "string" && id !== undefined && RELAYED_METHODS.has(method)) this.tie(id as string | number, extra as Partial<CarriedBy> | undefined)
      ;(client as ((m: JSONRPCMessage, e?: unknown) => void) | undefined)?.(message, extra)
    }
    const closed = transport.onclose
    transport.onclose = () => {
      this.failAll(McpError.fromError(ErrorCode.ConnectionClosed, "Connection closed"))
      closed?.()
    }
  }

  /** The tools' terms from tools/list (replacing the previous ones). */
  setTools(tools: ReadonlyArray<{ readonly name: string } & ToolTerms>): void {
    this.terms.clear()
    for (const tool of tools) {
      const check = tool.outputSchema !== undefined ? this.validator.getValidator(tool.outputSchema) : undefined
      this.terms.set(tool.name, { requiresTask: tool.taskSupport === "required", check })
    }
  }

  /**
   * tools/call, as the SDK's Client.callTool does it. With `hooks.onProgress` the request carries a
   * `progressToken` (its own id) and each progress restarts its time-out (the SDK's
   * `resetTimeoutOnProgress`), up to `hooks.maxTotalMs`.
   */
  async callTool(name: string, args: Record<string, unknown>, timeoutMs: number, signal: CancelSignal | undefined, hooks?: CallHooks): Promise<CallToolResult> {
    const terms = this.terms.get(name)
    if (terms?.requiresTask === true) {
      throw new McpError(ErrorCode.InvalidRequest, `Tool "${name}" requires task-based execution. Use client.experimental.tasks.callToolStream() instead.`)
    }
    const result = callToolResult(await this.request("tools/call", { name, arguments: args }, timeoutMs, signal, hooks))
    const check = terms?.check
    if (check !== undefined) {
      if (!result.structuredContent && !result.isError) {
        throw new McpError(ErrorCode.InvalidRequest, `Tool ${name} has an output schema but did not return structured content`)
      }
      if (result.structuredContent) {
        let outcome: JsonSchemaValidatorResult<unknown>
        try {
          outcome = check(result.structuredContent)
        } catch (error) {
          throw new McpError(ErrorCode.InvalidParams, `Failed to validate structured content: ${error instanceof Error ? error.message : String(error)}`)
        }
        if (!outcome.valid) throw new McpError(ErrorCode.InvalidParams, `Structured content does not match the tool's output schema: ${outcome.errorMessage}`)
      }
    }
    return result
  }

  /** ping. */
  async ping(timeoutMs: number, signal: CancelSignal | undefined): Promise<void> {
    emptyResult(await this.request("ping", undefined, timeoutMs, signal))
  }

  /**
   * One request: resolves with its `result`; rejects with an McpError for a JSON-RPC error, a
   * time-out (`RequestTimeout`, after `notifications/cancelled`) or a closed connection
   * (`ConnectionClosed`), with the signal's reason when the caller aborts, or with the transport's
   * send error.
   */
  private request(
    method: string,
    params: Record<string, unknown> | undefined,
    timeoutMs: number,
    signal: CancelSignal | undefined,
    hooks?: CallHooks
  ): Promise<unknown> {
    if (signal?.aborted === true) return Promise.reject(signal.reason)
    return new Promise((resolve, reject) => {
      const id = `${ID_PREFIX}${++this.next}`
      const timeout = Math.max(0, Math.min(timeoutMs, MAX_TIMER_MS))
      const onAbort = signal === undefined ? undefined : () => this.cancel(id, signal.reason, signal.reason)
      const timer = setTimeout(() => this.timedOut(id), timeout)
      const deadline = hooks?.maxTotalMs === undefined ? performance.now() + timeout : performance.now() + hooks.maxTotalMs
      this.pending.set(id, { resolve, reject, timer, signal, onAbort, hooks, timeoutMs: timeout, deadline })
      if (onAbort !== undefined) signal?.addEventListener("abort", onAbort, { once: true })
      const sent = hooks?.onProgress === undefined || params === undefined ? params : { ...params, _meta: { progressToken: id } }
      const message = (sent === undefined ? { jsonrpc: "2.0", id, method } : { jsonrpc: "2.0", id, method, params: sent }) as JSONRPCMessage
      this.transport.send(message).catch((error: unknown) => {
        const entry = this.settle(id)
        entry?.reject(error)
      })
    })
  }

  private timedOut(id: string): void {
    const timeout = this.pending.get(id)?.timeoutMs
    this.cancel(id, "Request timed out", McpError.fromError(ErrorCode.RequestTimeout, "Request timed out", { timeout }))
  }

  /**
   * A `notifications/progress`: when its token is one of its calls' (with `onProgress`), the call's
   * time-out restarts (never past its deadline) and the caller hears of it; true when it was its own
   * (a late one, for a call already settled, is dropped). A malformed progress is dropped too.
   */
  private progress(message: JSONRPCMessage): boolean {
    const params = (message as { params?: unknown }).params
    if (!isRecord(params)) return false
    const token = params["progressToken"]
    if (typeof token !== "string" || !token.startsWith(ID_PREFIX)) return false
    const entry = this.pending.get(token)
    const onProgress = entry?.hooks?.onProgress
    const { progress, total, message: text } = params
    if (entry === undefined || onProgress === undefined || typeof progress !== "number") return true
    const left = entry.deadline - performance.now()
    if (left >= entry.timeoutMs) entry.timer.refresh()
    else {
      clearTimeout(entry.timer)
      entry.timer = setTimeout(() => this.timedOut(token), Math.max(0, left))
    }
    onProgress({
      progress,
      ...(typeof total === "number" ? { total } : {}),
      ...(typeof text === "string" ? { message: text } : {})
    })
    return true
  }

  /** Upstream request id -> the id of the call it is tied to. */
  private readonly ties = new Map<string | number, string>()

  /**
   * Ties an upstream request to the call it belongs to: the call whose stream carried it (Streamable
   * HTTP tells), or else the only call in flight on the connection (stdio, SSE). Untied: declined.
   */
  private tie(requestId: string | number, extra: Partial<CarriedBy> | undefined): void {
    if (this.ties.size >= MAX_TIES) return
    let call: string | undefined
    if (extra?.carriedBy !== undefined) {
      for (const id of extra.carriedBy) if (typeof id === "string" && this.pending.get(id)?.hooks !== undefined) call = id
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
   * Answers an upstream request (elicitation, sampling) through the caller of the call it is tied
   * to, within the call's time left; aborted when the upstream cancels it or the call ends. Declined
   * (an McpError) when it is tied to no call in flight or the caller cannot answer it.
   */
  async relay(requestId: string | number, request: { method: string; params?: Record<string, unknown> }, signal: AbortSignal): Promise<Record<string, unknown>> {
    const call = this.ties.get(requestId)
    this.ties.delete(requestId)
    const entry = call === undefined ? undefined : this.pending.get(call)
    if (entry === undefined) throw new McpError(ErrorCode.InvalidRequest, `mcp-store declined ${request.method}: it is not tied to a tool call in flight`)
    const relay = entry.hooks?.relay
    if (relay === undefined) throw new McpError(ErrorCode.InvalidRequest, `mcp-store declined ${request.method}: the caller of this tool call cannot answer it`)
    entry.relays ??= new AbortController()
    return relay(request, { signal: AbortSignal.any([signal, entry.relays.signal]), timeoutMs: Math.max(0, entry.deadline - performance.now()) })
  }

  /** Takes a request off the books: its timer and abort listener go. */
  private settle(id: string): Pending | undefined {
    const entry = this.pending.get(id)
    if (entry === undefined) return undefined
    this.pending.delete(id)
    clearTimeout(entry.timer)
    entry.relays?.abort(new Error("the tool call ended"))
    if (this.ties.size > 0) for (const [request, call] of this.ties) if (call === id) this.ties.delete(request)
    if (entry.onAbort !== undefined) entry.signal?.removeEventListener("abort", entry.onAbort)
    return entry
  }

  /** Gives a request up (time-out, abort): the server is told, as the SDK tells it. */
  private cancel(id: string, reason: unknown, error: unknown): void {
    const entry = this.settle(id)
    if (entry === undefined) return
    this.transport
      .send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: id, reason: String(reason) } })
      .catch((e: unknown) => this.transport.onerror?.(new Error(`Failed to send cancellation: ${String(e)}`)))
    entry.reject(error)
  }

  private answer(id: string, message: JSONRPCMessage): void {
    const entry = this.settle(id)
    if (entry === undefined) return // answered after its time-out or abort: dropped
    const m = message as { result?: unknown; error?: { code?: unknown; message?: unknown; data?: unknown } }
    if ("result" in m) {
      entry.resolve(m.result)
      return
    }
    const error = m.error
    if (isRecord(error) && typeof error.code === "number" && typeof error.message === "string") {
      entry.reject(McpError.fromError(error.code, error.message, error.data))
    } else {
      entry.reject(new McpRequestError("protocol", `the server answered with a message that is neither a result nor an error: ${JSON.stringify(message).slice(0, 200)}`))
    }
  }

  private failAll(error: unknown): void {
    for (const id of [...this.pending.keys()]) this.settle(id)?.reject(error)
  }
}
