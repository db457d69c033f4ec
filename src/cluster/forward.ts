/**
 * Requests to the replica that owns a service (docs/replicas.md, "Forwarding"): the connection a
 * mirroring actor holds (src/machines/replicated.ts `useRemote`) is a `RemoteConnection`, an
 * `McpConnection` whose requests go to the owner over HTTP (`POST /_cluster/v1/forward`, one
 * keep-alive agent, signed with the cluster secret: src/cluster/signature.ts), so calls, resource
 * reads, prompts and completions on any replica go through the very code a local service takes
 * (src/runtime/calls.ts, catalog.ts): records, allow-lists, progress and time-outs stay where the
 * request arrived, only the MCP request itself runs on the owner. Never request/response over
 * pub/sub.
 *
 * The answer is a stream of JSON lines: `{"p": progress}` while a tool call runs (each restarts the
 * time-out here too, as it does on the owner), then one `{"r": result}` or `{"e": failure}`, a
 * failure keeping its `McpRequestError` kind. A request that no owner ran (the owner gone or moving)
 * is sent again to the next owner, within its time-out. Cancelling the request (the caller went away)
 * closes it, and the owner cancels the upstream request. What cannot cross replicas (resource
 * subscriptions, logging levels, an upstream's elicitation or sampling request during a call) is
 * refused or declined.
 */
import { randomUUID } from "node:crypto"
import { Agent, request as httpRequest, type IncomingMessage } from "node:http"
import { request as httpsRequest } from "node:https"
import type { CallToolResult, CompleteResult, GetPromptResult, ReadResourceResult } from "@modelcontextprotocol/sdk/types.js"
import type { ServiceEvent } from "../machines/service.js"
import {
  EMPTY_CATALOG,
  McpRequestError,
  type CallOptions,
  type CallProgress,
  type CancelSignal,
  type Catalog,
  type CatalogCapabilities,
  type CompleteParams,
  type FailureKind,
  type McpConnection,
  type RequestOptions,
  type ToolInfo
} from "../mcp/types.js"
import { sign, SIGNATURE_HEADER } from "./signature.js"
import type { ConnectionFacts } from "./shared-views.js"

/** The path of the forwarding route. */
export const FORWARD_PATH = "/_cluster/v1/forward"

/** The events a mirroring replica passes to the owner (the commands only the owner can carry out). */
export const FORWARDED_EVENTS: ReadonlySet<string> = new Set(["RESTART", "REFRESH_TOOLS", "AUTHORIZED"])

/** One forwarded request, as it travels. `id` is unique per request (the owner refuses a replay). */
export type ForwardRequest = { readonly id: string; readonly field: string; readonly timeoutMs: number } & (
  | {
      readonly op: "call"
      readonly tool: string
      readonly args: Record<string, unknown>
      readonly maxTotalMs?: number | undefined
      /** The call's trace context, as the upstream gets it in `_meta`. */
      readonly meta?: Readonly<Record<string, string>> | undefined
    }
  | { readonly op: "read"; readonly uri: string }
  | { readonly op: "prompt"; readonly name: string; readonly args: Record<string, string> }
  | { readonly op: "complete"; readonly params: CompleteParams }
  | { readonly op: "ping" }
  | { readonly op: "event"; readonly event: ServiceEvent }
  /** Whether the receiving replica reaches Redis now (`field` is empty): an outage or a partition? */
  | { readonly op: "redis" }
)

/** A failure as it travels: an `McpRequestError`'s fields. */
export interface WireFailure {
  readonly kind: FailureKind
  readonly message: string
  readonly code?: number | undefined
  readonly data?: unknown
  readonly permanent?: boolean | undefined
  readonly hint?: string | undefined
  readonly httpStatus?: number | undefined
  /** The owner did not run it (it no longer owns the service): it may be sent to the next owner. */
  readonly notRun?: boolean | undefined
}

/** A request that did not reach a replica that runs the service: safe to send again. */
export class NotDelivered extends McpRequestError {
  constructor(message: string) {
    super("transport", message)
  }
}

/** Between two tries of a request that was not delivered (ms). */
const RETRY_MS = 200

/** One line of a forwarded request's answer. */
export type ForwardLine = { readonly p: CallProgress } | { readonly r: unknown } | { readonly e: WireFailure }

export const toWire = (e: McpRequestError): WireFailure => ({
  ...(e instanceof NotDelivered ? { notRun: true } : {}),
  kind: e.kind,
  message: e.message,
  code: e.code,
  data: e.data,
  permanent: e.permanent,
  hint: e.hint,
  httpStatus: e.httpStatus
})

const fromWire = (f: WireFailure): McpRequestError =>
  new McpRequestError(f.kind, String(f.message), f.code, f.data, { permanent: f.permanent, hint: f.hint, httpStatus: f.httpStatus })

type Without<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never

/** What the forwarder needs of the cluster. */
export interface ForwardTarget {
  /** The cluster secret. */
  readonly secret: string
  /** The URL of the replica that owns `field` now (undefined: none known). */
  ownerUrl(field: string): Promise<string | undefined>
  /** The largest answer read (bytes): the store's message cap, twice, for the JSON framing. */
  readonly maxAnswerBytes: number
}

/** Sends forwarded requests to owners, on one keep-alive agent. */
export class Forwarder {
  readonly #agent = new Agent({ keepAlive: true, maxSockets: 256 })

  constructor(private readonly target: ForwardTarget) {}

  /**
   * Sends one request to the owner of `request.field`; resolves with its result, or rejects with an
   * `McpRequestError` (the owner's, or `transport` when the owner cannot be reached, `timeout`,
   * `aborted`). `onProgress` gets each progress line.
   */
  async send(
    request: Without<ForwardRequest, "id">,
    options: { readonly signal?: CancelSignal | undefined; readonly onProgress?: ((p: CallProgress) => void) | undefined; readonly maxTotalMs?: number | undefined }
  ): Promise<unknown> {
    // While the service moves (its owner gone, the next not known yet, or the request refused as
    // "not mine"), a request that was never run is sent again to whoever owns it next, within its time-out.
    const deadline = performance.now() + request.timeoutMs
    for (;;) {
      if (options.signal?.aborted === true) throw new McpRequestError("aborted", "the request was cancelled")
      const url = await this.target.ownerUrl(request.field)
      try {
        if (url === undefined) throw new NotDelivered(`no replica runs ${request.field} now (its owner is changing)`)
        return await this.sendTo(url, { ...request, timeoutMs: Math.max(0, deadline - performance.now()) }, options)
      } catch (e) {
        if (!(e instanceof NotDelivered)) throw e
        if (performance.now() + RETRY_MS >= deadline) throw new McpRequestError("transport", `${e.message}; try again shortly`)
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS))
      }
    }
  }

  /** `send` to the replica at `url`. */
  sendTo(
    url: string,
    request: Without<ForwardRequest, "id">,
    options: { readonly signal?: CancelSignal | undefined; readonly onProgress?: ((p: CallProgress) => void) | undefined; readonly maxTotalMs?: number | undefined }
  ): Promise<unknown> {
    const body = JSON.stringify({ ...request, id: randomUUID() })
    const target = new URL(FORWARD_PATH, url)
    const send = target.protocol === "https:" ? httpsRequest : httpRequest
    return new Promise<unknown>((resolve, reject) => {
      let settled = false
      let timer: NodeJS.Timeout | undefined
      const started = performance.now()
      const finish = (error: McpRequestError | undefined, value?: unknown) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        options.signal?.removeEventListener("abort", onAbort)
        if (error !== undefined) {
          req.destroy()
          reject(error)
        } else resolve(value)
      }
      // The owner's own time-out comes first; this one covers an owner that went silent.
      const arm = () => {
        clearTimeout(timer)
        const cap = options.maxTotalMs === undefined ? Infinity : options.maxTotalMs - (performance.now() - started)
        timer = setTimeout(() => finish(new McpRequestError("timeout", `no answer from the replica that runs ${request.field} within ${request.timeoutMs} ms`)), Math.max(0, Math.min(request.timeoutMs, cap)) + 1000)
      }
      const onAbort = () => finish(new McpRequestError("aborted", "the request was cancelled"))
      const req = send(target, {
        method: "POST",
        agent: target.protocol === "https:" ? undefined : this.#agent,
        headers: {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
          [SIGNATURE_HEADER]: sign(this.target.secret, "POST", FORWARD_PATH, body)
        }
      })
      req.on("error", (e: NodeJS.ErrnoException) => {
        const message = `the replica that runs ${request.field} cannot be reached (${e.message})`
        // Refused: nothing was sent, so it can be sent elsewhere (the replica is gone).
        finish(e.code === "ECONNREFUSED" ? new NotDelivered(message) : new McpRequestError("transport", message))
      })
      req.on("response", (response: IncomingMessage) => {
        if (response.statusCode !== 200) {
          response.resume()
          return finish(new McpRequestError("transport", `the replica that runs ${request.field} refused the forwarded request (HTTP ${response.statusCode})`))
        }
        readLines(response, this.target.maxAnswerBytes, (line) => {
          if ("p" in line) {
            arm()
            options.onProgress?.(line.p)
          } else if ("r" in line) finish(undefined, line.r)
          else if ("e" in line) finish(line.e.notRun === true ? new NotDelivered(String(line.e.message)) : fromWire(line.e))
        }).then(
          () => finish(new McpRequestError("transport", `the replica that runs ${request.field} ended its answer early`)),
          (e: Error) => finish(new McpRequestError("transport", `the answer of the replica that runs ${request.field} was unreadable (${e.message})`))
        )
      })
      options.signal?.addEventListener("abort", onAbort, { once: true })
      arm()
      req.end(body)
    })
  }

  /** Closes the keep-alive sockets. */
  close(): void {
    this.#agent.destroy()
  }
}

/** Reads JSON lines from a response, at most `maxBytes` in all; resolves at its end. */
const readLines = (response: IncomingMessage, maxBytes: number, onLine: (line: ForwardLine) => void): Promise<void> =>
  new Promise((resolve, reject) => {
    let buffered: Buffer[] = []
    let total = 0
    response.on("data", (chunk: Buffer) => {
      total += chunk.length
      if (total > maxBytes) {
        response.destroy()
        return reject(new Error(`more than ${maxBytes} bytes`))
      }
      let start = 0
      for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, start)) {
        buffered.push(chunk.subarray(start, i))
        const text = Buffer.concat(buffered).toString("utf8")
        buffered = []
        start = i + 1
        try {
          onLine(JSON.parse(text) as ForwardLine)
        } catch (e) {
          response.destroy()
          return reject(e as Error)
        }
      }
      if (start < chunk.length) buffered.push(chunk.subarray(start))
    })
    response.on("end", () => resolve())
    response.on("error", reject)
    response.on("aborted", () => reject(new Error("aborted")))
  })

const NOT_HERE = -32601

/**
 * The connection of a service that another replica runs: each request forwarded to that replica;
 * what it shows of the live connection (server info, capabilities, stderr) comes from the owner's
 * last published view (`facts`).
 */
export class RemoteConnection implements McpConnection {
  constructor(
    readonly field: string,
    private readonly forwarder: Forwarder,
    private readonly facts: () => ConnectionFacts | undefined
  ) {}

  get transportType(): McpConnection["transportType"] {
    return this.facts()?.transportType ?? "streamable_http"
  }
  get serverInfo(): McpConnection["serverInfo"] {
    return this.facts()?.serverInfo
  }
  get capabilities(): CatalogCapabilities {
    return this.facts()?.capabilities ?? { resources: false, subscribe: false, prompts: false, completions: false }
  }
  get logging(): boolean {
    return false
  }
  /** No process here: the owner's process is counted where it runs. */
  readonly pid = undefined
  /** The era is negotiated and remembered by the owner, which connects. */
  readonly protocolVersion = undefined
  readonly era = undefined

  async ping(options: CallOptions): Promise<number> {
    const started = performance.now()
    await this.forwarder.send({ op: "ping", field: this.field, timeoutMs: options.timeoutMs }, { signal: options.signal })
    return performance.now() - started
  }

  callTool(name: string, args: Record<string, unknown>, options: CallOptions): Promise<CallToolResult> {
    const maxTotalMs = options.hooks?.maxTotalMs
    return this.forwarder.send(
      { op: "call", field: this.field, tool: name, args, timeoutMs: options.timeoutMs, maxTotalMs, meta: options.meta },
      { signal: options.signal, onProgress: options.hooks?.onProgress, maxTotalMs }
    ) as Promise<CallToolResult>
  }

  readResource(uri: string, options: RequestOptions): Promise<ReadResourceResult> {
    return this.forwarder.send({ op: "read", field: this.field, uri, timeoutMs: options.timeoutMs }, { signal: options.signal }) as Promise<ReadResourceResult>
  }

  getPrompt(name: string, args: Record<string, string>, options: RequestOptions): Promise<GetPromptResult> {
    return this.forwarder.send({ op: "prompt", field: this.field, name, args, timeoutMs: options.timeoutMs }, { signal: options.signal }) as Promise<GetPromptResult>
  }

  complete(params: CompleteParams, options: RequestOptions): Promise<CompleteResult> {
    return this.forwarder.send({ op: "complete", field: this.field, params, timeoutMs: options.timeoutMs }, { signal: options.signal }) as Promise<CompleteResult>
  }

  /** The lists are the owner's, from its views: a mirror never lists. */
  async listTools(): Promise<ReadonlyArray<ToolInfo>> {
    throw new McpRequestError("protocol", "tools are listed by the replica that runs the service", NOT_HERE)
  }
  async listCatalog(): Promise<Catalog> {
    return EMPTY_CATALOG
  }

  async subscribeResource(): Promise<void> {
    throw new McpRequestError("protocol", "resource subscriptions are taken only by the replica that runs the service; connect to it, or read the resource", NOT_HERE)
  }
  async unsubscribeResource(): Promise<void> {}
  async setLoggingLevel(): Promise<void> {
    throw new McpRequestError("protocol", "logging levels are set only by the replica that runs the service", NOT_HERE)
  }

  onResourceUpdated(): () => void {
    return () => undefined
  }
  onCatalogChanged(): () => void {
    return () => undefined
  }
  onLogMessage(): () => void {
    return () => undefined
  }
  onToolsChanged(): () => void {
    return () => undefined
  }
  onClose(): () => void {
    return () => undefined
  }
  stderrTail(): ReadonlyArray<string> {
    return this.facts()?.stderr ?? []
  }
  /** Nothing to close here: the owner's connection is the owner's. */
  async close(): Promise<void> {}
}
