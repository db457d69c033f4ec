/**
 * Opens a live MCP connection for a resolved service definition. Each call builds a new session
 * (src/mcp/session.ts, the connection's one protocol engine) and transport (a reconnection never
 * reuses either; Streamable HTTP runs on the store's own transport, src/mcp/http-transport.ts, SSE
 * on the SDK's, stdio on src/mcp/stdio.ts), runs every request through `mcpRequest`, and
 * hides the transports' differences behind `McpConnection`: the session DELETE for Streamable HTTP,
 * the process group and stderr for stdio, "closed by itself" against "closed by us".
 *
 * Every transport reads at most `maxMessageBytes` per message (SSE through `boundedFetch`). A
 * message over it closes the connection; the requests it fails, and the close itself, then name
 * that cause (`message_too_large`) rather than a mere closed connection. The checks of tool outputs
 * run on the store's linear-time validators (src/mcp/json-schema.ts), loaded by the first connection
 * (ajv and RE2 are half a megabyte that a store with no service never needs).
 *
 * The era is negotiated here (src/mcp/era.ts decides): without a remembered verdict (`prior`) or a
 * pinned revision, a `server/discover` probe first; a modern server is spoken to in the modern era
 * (its change notifications, and resource subscriptions, go through `subscriptions/listen`), any other falls back to the
 * `initialize` handshake on the same transport (a stdio server that exits on the probe is started
 * again). A server that speaks no revision the store speaks, or not the pinned one, is a permanent
 * failure whose hint names both sides' revisions.
 *
 * A failed connect is classified here, at the transport edge: a failure that retrying soon cannot
 * mend (the executable does not exist or cannot be run, the URL answers the first initialize with
 * 404 or 405, the URL speaks the other HTTP transport: asked once, src/mcp/probe.ts) is marked
 * `permanent`, with a hint for the user (`permanentFailure`).
 */
import type { CallToolResult, CompleteResult, GetPromptResult, LoggingLevel, LoggingMessageNotification, ReadResourceResult } from "@modelcontextprotocol/client"
import { LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/server"
import { maskArgs, maskUrl } from "../domain/secrets.js"
import type { ResolvedDefinition } from "../domain/service-definition.js"
import { boundedFetch } from "./bounded-fetch.js"
import { DEFAULT_UPSTREAM_POLICY, UpstreamRefused, type UpstreamPolicy } from "./upstream-policy.js"
import { isModernVersion, MODERN_PROTOCOL_VERSION } from "../domain/protocol-versions.js"
import { classifyProbe, discoverFacts, mismatchHint, supportedList, UNSUPPORTED_PROTOCOL_VERSION, type EraVerdict, type ProbeOutcome } from "./era.js"
import { HttpAnswerError, HttpClientTransport } from "./http-transport.js"
import { paramHeadersOf, type ParamHeader } from "./param-headers.js"
import { log } from "../logging/log.js"
import { probeTransport } from "./probe.js"
import { fetchWithAuth, type AuthorizationRequiredError, type UpstreamAuth } from "./oauth-client.js"
import { bareMessage, isConnectionClosed, isRequestTimeout, ProtocolError, SdkError } from "./protocol-error.js"
import { classifyFailure, mcpBoundedRequest, mcpRequest, type RequestControls } from "./request.js"
import { isSseError, clientPackage, type SseError, type SSEClientTransport, type SSEClientTransportClass } from "./client-package.js"
import { RequestFloodError, Session, UnsupportedVersionAnswer, type SessionNotification, type SessionOptions } from "./session.js"
import { describeExit, StdioProcessTransport } from "./stdio.js"
import { DEFAULT_MAX_MESSAGE_BYTES, McpRequestError, MessageTooLargeError, StreamableHttpError, EMPTY_CATALOG, type CallOptions, type Catalog, type CatalogCapabilities, type CompleteParams, type ConnectOptions, type McpConnection, type InputRequestOptions, type ListTtl, type ProcessLedger, type RequestOptions, type TaskMethod, type ToolInfo, type UpstreamTask } from "./types.js"
import { type CancelSignal, Cancel, settledWithin } from "../domain/cancellation.js"
import { onDemand } from "../domain/on-demand.js"

/** Client name sent in the initialize handshake when none is given. */
export const DEFAULT_CLIENT_NAME = "mcp-store"

/** How long `close()` waits for the Streamable HTTP session DELETE. */
const TERMINATE_SESSION_TIMEOUT_MS = 1_000

/** How many stderr lines a failed stdio connect quotes in its message. */
const STDERR_LINES_IN_ERRORS = 10

/** What to do about a refused upstream address. */
const UPSTREAM_HINT = "point the service at an allowed address, or widen --upstream-allow (--upstream-allow-metadata for metadata addresses)"

/** Stops a misbehaving server that keeps handing out cursors (tools, resources, templates, prompts). */
const MAX_LIST_PAGES = 1_000
/** The most text the pages of one list may bring together (items and cursors, as JSON). */
const MAX_LIST_CHARACTERS = 64 * 1024 * 1024

/** How much of an SSE service's error answer is kept (as the Streamable HTTP transport does): no oracle for a hostile URL. */
const ERROR_BODY_BYTES = 200

type Opened =
  | { readonly type: "streamable_http"; readonly transport: HttpClientTransport }
  | {
      readonly type: "sse"
      readonly transport: SSEClientTransport
      /** Why the upstream wants an OAuth authorization, once its fetch found so (the event source hides it). */
      readonly authorizationRequired: () => AuthorizationRequiredError | undefined
    }
  | { readonly type: "stdio"; readonly transport: StdioProcessTransport }

/**
 * Connects to a service: builds a new session and transport, runs the initialize handshake within
 * the time-out, and returns the live connection. When anything fails, everything it created is
 * released (a local process group is ended) and it rejects with `McpRequestError`; for stdio the
 * message tells how the process ended and quotes its last stderr lines.
 */
export async function connect(def: ResolvedDefinition, options: ConnectOptions): Promise<McpConnection> {
  const policy = options.upstream ?? DEFAULT_UPSTREAM_POLICY
  if (def.kind === "remote") {
    try {
      policy.checkUrl(new URL(def.url))
      if (def.transport === "sse") await policy.checkResolved(new URL(def.url))
    } catch (e) {
      if (!(e instanceof UpstreamRefused)) throw new McpRequestError("transport", `connect to ${describeTarget(def)}: ${String((e as Error).message)}`)
      throw new McpRequestError("transport", e.message, undefined, undefined, { permanent: true, hint: UPSTREAM_HINT })
    }
  }
  const launch = def.kind === "local" ? launchKey(def) : undefined
  let prior = options.prior ?? (launch === undefined ? undefined : probeExits.get(launch))
  // A stdio server that exited on the era probe is a 2025-era one: started again, for the handshake.
  for (;;) {
    try {
      return await connectOnce(def, policy, prior, options)
    } catch (error) {
      if (!(error instanceof ExitedOnProbe)) throw error
      prior = { kind: "legacy", version: LATEST_PROTOCOL_VERSION }
      if (launch !== undefined) remember(launch, prior)
    }
  }
}

/**
 * The stdio launches (command, arguments, directory, environment) whose server exited on the era
 * probe: their next attempts, connected or not, go straight to the handshake, so a command that
 * fails at once starts one process per attempt, not two. At most `MAX_REMEMBERED` launches, the
 * oldest forgotten first; a launch that turns out modern is told by its answer to `initialize`.
 */
const probeExits = new Map<string, EraVerdict>()
const MAX_REMEMBERED = 1_000
const launchKey = (def: Extract<ResolvedDefinition, { kind: "local" }>): string => JSON.stringify([def.command, def.args, def.cwd ?? null, def.env])
const remember = (launch: string, verdict: EraVerdict): void => {
  probeExits.delete(launch)
  probeExits.set(launch, verdict)
  if (probeExits.size > MAX_REMEMBERED) probeExits.delete(probeExits.keys().next().value as string)
}

/** The probe's stdio server exited (a 2025-era server that ends on a request before `initialize`). */
class ExitedOnProbe extends Error {}

/** The validators of tool outputs (src/mcp/json-schema.ts), loaded by the first connection. */
const jsonSchema = onDemand(() => import("./json-schema.js"))

/** The validators, loaded now if they are not yet: a failed load fails the connection as any other failure of it. */
const loadJsonSchema = (def: ResolvedDefinition) =>
  jsonSchema.load().catch((e: unknown) => {
    throw new McpRequestError("transport", `connect to ${describeTarget(def)}: ${String((e as Error)?.message ?? e)}`)
  })

/** One connection attempt of `connect`, on a new transport, with the era of `prior` if given. */
const connectOnce = async (def: ResolvedDefinition, policy: UpstreamPolicy, prior: EraVerdict | undefined, options: ConnectOptions): Promise<McpConnection> => {
  const { upstreamSchemaValidator } = jsonSchema.loaded ?? (await loadJsonSchema(def))
  const sse = def.kind === "remote" && def.transport === "sse" ? (await clientPackage()).SSEClientTransport : undefined
  const opened = openTransport(def, options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES, policy, options.auth, options.processes, sse)
  // roots only for a definition that lists them: the server then asks roots/list, answered from it.
  const connection = new UpstreamConnection(
    opened,
    {
      clientInfo: { name: options.clientName ?? DEFAULT_CLIENT_NAME, version: "1.0.0" },
      roots: def.roots,
      validator: upstreamSchemaValidator
    },
    options.service
  )
  try {
    await connection.request(`connect to ${describeTarget(def)}`, (controls) => negotiate(connection, def, prior, controls), options)
  } catch (error) {
    if (connection.exitedOnProbe) {
      await connection.close()
      throw new ExitedOnProbe()
    }
    const required = opened.type === "sse" ? opened.authorizationRequired() : undefined
    // An SSE stream refused for want of an authorization fails as a bare stream error: named here.
    const failure =
      required !== undefined
        ? classifyFailure(`connect to ${describeTarget(def)}`, required, options)
        : error instanceof McpRequestError
          ? error
          : new McpRequestError("transport", String(error))
    if (opened.type === "stdio" && failure.kind === "transport") {
      // A broken pipe can be noticed a moment before the exit itself (longer on a loaded machine).
      await opened.transport.waitForExit(1000)
    }
    // The transport may close on the failed write before the exit is seen; a process that
    // exited with a code (no signal of ours) still ended by itself.
    const exit = opened.type === "stdio" ? opened.transport.exit : undefined
    const ended =
      opened.type === "stdio" &&
      (opened.transport.endedByItself || (exit?.kind === "exited" && exit.signal === null))
    await connection.close()
    const spawnError = opened.type === "stdio" && exit?.kind === "spawn_failed" ? exit.error : undefined
    const probed = options.signal?.aborted === true ? undefined : await otherTransport(def, failure)
    const permanent = permanentFailure(def, failure, spawnError, probed)
    const message =
      permanent?.message ?? (opened.type === "stdio" ? withProcessReport(failure.message, opened.transport, ended) : failure.message)
    const hint = permanent?.hint ?? failure.hint ?? (opened.type === "stdio" ? stdioHint(opened.transport.stderrTail()) : undefined)
    if (message === failure.message && hint === undefined) throw failure
    throw new McpRequestError(failure.kind, message, failure.code, failure.data, {
      permanent: failure.permanent || permanent !== undefined,
      hint,
      httpStatus: failure.httpStatus
    })
  }
  connection.connected = true
  if (connection.session.modern) connection.listen()
  return connection
}

/** How long a stdio server may take to answer the era probe before it counts as a 2025-era one. */
const STDIO_PROBE_TIMEOUT_MS = 5_000

/**
 * Settles the era on a started-to-be session: the pinned revision, else the remembered verdict
 * (no round trip for a modern one, no probe for a 2025 one), else the `server/discover` probe and,
 * for a 2025-era server, the initialize handshake. Throws a permanent `McpRequestError` on a version
 * mismatch, `ExitedOnProbe` when a stdio server exited on the probe, and what the probe failed with
 * when its outcome says nothing about the era (an outage, an authorization wall).
 */
const negotiate = async (connection: UpstreamConnection, def: ResolvedDefinition, prior: EraVerdict | undefined, controls: RequestControls): Promise<void> => {
  const session = connection.session
  await session.start()
  const pin = def.protocolVersion
  if (pin !== undefined && !isModernVersion(pin)) return handshake(session, pin, controls)
  if (def.transport === "sse") {
    // The HTTP+SSE transport is 2024-11-05's: there is no modern era on it.
    if (pin !== undefined) throw mismatch(`the SSE transport has no protocol revision ${pin}`, `the 2026-07-28 revision is served over Streamable HTTP: set "transport": "streamable_http", or drop "protocol_version"`)
    return handshake(session, undefined, controls)
  }
  if (prior?.kind === "legacy" && pin === undefined) return handshake(session, undefined, controls)
  if (prior?.kind === "modern" && (pin === undefined || pin === prior.version)) return session.adopt(prior.version, prior.discover)
  const transport = def.kind === "local" ? "stdio" : "http"
  const version = pin ?? MODERN_PROTOCOL_VERSION
  // Only a probe that may fall back is cut short: a pinned revision has nothing to fall back to.
  const timeout = transport === "stdio" && pin === undefined ? Math.min(controls.timeout, STDIO_PROBE_TIMEOUT_MS) : controls.timeout
  let outcome: ProbeOutcome
  let failure: unknown
  try {
    outcome = { kind: "result", result: await session.discover(version, { timeout, signal: controls.signal }) }
  } catch (error) {
    failure = error
    const probed = probeOutcome(error)
    if (probed === undefined) throw error
    outcome = probed
  }
  const verdict = classifyProbe(outcome, transport)
  switch (verdict.kind) {
    case "modern":
      return session.adopt(verdict.version, verdict.discover)
    case "mismatch":
      throw mismatch(`the server does not speak protocol revision ${version} (it speaks ${verdict.supported.join(", ")})`, mismatchHint(verdict.supported, pin))
    case "inconclusive":
      throw failure ?? new Error("the era probe failed")
    case "legacy":
      // A pinned server that did not answer or exited: a failure like any other (its process report), not a mismatch.
      if (pin !== undefined && (outcome.kind === "timeout" || outcome.kind === "closed")) throw failure ?? new Error("the era probe failed")
      if (pin !== undefined) {
        throw mismatch(
          `the server does not answer server/discover as a server of protocol revision ${pin} does: it speaks a 2025-era revision`,
          `the server speaks a 2025-era revision (initialize handshake); the definition pins "protocol_version": "${pin}": drop "protocol_version" or pin a 2025-era one`
        )
      }
      if (outcome.kind === "closed") {
        connection.exitedOnProbe = true
        throw new ExitedOnProbe()
      }
      return handshake(session, undefined, controls)
  }
}

/**
 * The initialize handshake, offering the pinned revision (which the server must then speak) or the
 * newest. A modern server refuses it with -32022: spoken to in the modern era when it speaks 2026-07-28
 * and nothing is pinned (a stdio server too slow for the probe), else a permanent mismatch.
 */
const handshake = async (session: Session, pin: string | undefined, controls: RequestControls): Promise<void> => {
  try {
    await session.open(controls, pin ?? LATEST_PROTOCOL_VERSION, pin !== undefined)
  } catch (error) {
    if (error instanceof UnsupportedVersionAnswer) {
      throw mismatch(error.message, mismatchHint([error.answered], pin))
    }
    // A modern-only server's refusal: in-band (stdio), or the JSON-RPC error of an HTTP 400.
    const refusal = error instanceof ProtocolError ? error : error instanceof HttpAnswerError ? error.rpcError : undefined
    if (refusal === undefined || refusal.code !== UNSUPPORTED_PROTOCOL_VERSION) throw error
    const supported = supportedList(refusal.data) ?? []
    if (pin === undefined && supported.includes(MODERN_PROTOCOL_VERSION)) {
      const facts = discoverFacts(await session.discover(MODERN_PROTOCOL_VERSION, controls))
      if (facts !== undefined) return session.adopt(MODERN_PROTOCOL_VERSION, facts)
    }
    throw mismatch(
      `the server refused the initialize handshake (offered ${pin ?? LATEST_PROTOCOL_VERSION}): ${bareMessage(refusal).slice(0, 200)}`,
      mismatchHint(supported, pin),
      refusal
    )
  }
}

/** A version mismatch: permanent, with its hint. */
const mismatch = (message: string, hint: string, cause?: { readonly code: number; readonly data?: unknown }): McpRequestError =>
  new McpRequestError("protocol", `protocol version mismatch: ${message}`, cause?.code ?? UNSUPPORTED_PROTOCOL_VERSION, cause?.data, { permanent: true, hint })

/** What a failed probe tells of the era, or undefined when it says nothing (rethrown as it is). */
const probeOutcome = (error: unknown): ProbeOutcome | undefined => {
  if (isRequestTimeout(error)) return { kind: "timeout" }
  if (isConnectionClosed(error)) return { kind: "closed" }
  if (error instanceof ProtocolError) {
    return { kind: "rpc_error", code: error.code, message: error.message, data: error.data }
  }
  if (error instanceof HttpAnswerError) {
    const status = error.code ?? 0
    // The JSON-RPC error of a 4xx: read as an in-band one (a 401, 403 or 5xx says nothing of the era).
    const rpc = error.rpcError
    if (rpc !== undefined && status >= 400 && status < 500 && status !== 401 && status !== 403) return { kind: "rpc_error", code: rpc.code, message: rpc.message, data: rpc.data }
    return { kind: "http_error", status, body: error.body }
  }
  if (error instanceof StreamableHttpError && error.code > 0) return { kind: "http_error", status: error.code, body: undefined }
  return undefined
}

/**
 * Whether a connect that used a remembered era failed in a way a changed server explains (a JSON-RPC
 * error, an HTTP 4xx other than an authorization wall): the owner then connects again without it.
 */
export const eraSuspect = (error: unknown): boolean => {
  if (!(error instanceof McpRequestError) || error.authorizationRequired) return false
  if (error.kind === "protocol" || error.kind === "session_expired") return true
  const status = error.httpStatus
  return error.kind === "transport" && status !== undefined && status >= 400 && status < 500 && status !== 401 && status !== 403
}

/** One live session, its transport, and the listeners of the connection's owner. */
class UpstreamConnection implements McpConnection {
  readonly transportType: "streamable_http" | "sse" | "stdio"
  private readonly closeListeners = new Set<(reason: string) => void>()
  private readonly toolsListeners = new Set<() => void>()
  private readonly catalogListeners = new Set<() => void>()
  private readonly updatedListeners = new Set<(uri: string) => void>()
  private readonly logListeners = new Set<(message: LoggingMessageNotification["params"]) => void>()
  private closedByUs = false
  private closing: Promise<void> | undefined
  private selfCloseReason: string | undefined
  /** The message over the size limit that ended the connection, if one did. */
  private tooLarge: MessageTooLargeError | undefined
  /** The connection's protocol engine (src/mcp/session.ts). */
  readonly session: Session

  settleOnClose(withinMs: number, signal?: AbortSignal): void {
    this.settle = { withinMs, signal }
  }
  /** What the next close waits for first (`settleOnClose`). */
  private settle: { readonly withinMs: number; readonly signal: AbortSignal | undefined } | undefined
  /** The handshake is done: from now on the end of an SSE service's stream ends the connection. */
  connected = false
  /** The stdio server exited on the era probe (a 2025-era server): `connect` starts it again. */
  exitedOnProbe = false
  /** Why an SSE service's stream ended, once it did. */
  private sseStreamEnded: string | undefined

  constructor(
    private readonly opened: Opened,
    options: SessionOptions,
    /** The service, as log lines name it (`ConnectOptions.service`). */
    private readonly service: string | undefined
  ) {
    this.transportType = opened.type
    this.session = new Session(opened.transport, options, {
      onClose: () => this.onTransportClosed(),
      // Transport hiccups (a stray stdout line, a bad event) are not failures by themselves: a failing
      // request or the close is what the owner acts on. A message over the size limit is noted: the
      // transport closes right after it, and the failures that follow carry its name. A flood of the
      // server's requests is a warning. The end of an SSE service's stream ends its session: the
      // connection closes (`sseEnded`).
      onError: (error) => {
        if (error instanceof MessageTooLargeError) this.tooLarge ??= error
        else if (error instanceof RequestFloodError) this.warn(error.message, "request_flood")
        else if (isSseError(error) && opened.type === "sse" && this.connected) this.sseEnded(error, opened.transport)
      },
      onNotification: (notification) => this.notified(notification)
    })
  }

  private notified(notification: SessionNotification): void {
    switch (notification.kind) {
      case "tools_changed":
        for (const listener of [...this.toolsListeners]) listener()
        return
      case "catalog_changed":
        for (const listener of [...this.catalogListeners]) listener()
        return
      case "resource_updated":
        for (const listener of [...this.updatedListeners]) listener(notification.uri)
        return
      case "log":
        // One handler for every message: the listeners (the MCP endpoint's relay) bound what they pass on.
        for (const listener of this.logListeners) listener(notification.params)
    }
  }

  /** A warning about what the server sent, naming the service (when known) in the text and the `service` field. */
  private warn(text: string, event: string, fields: Record<string, unknown> = {}): void {
    log.warn(this.service === undefined ? text : `service ${this.service}: ${text}`, { event, ...(this.service === undefined ? {} : { service: this.service }), ...fields })
  }

  get logging(): boolean {
    return this.session.serverCapabilities?.logging !== undefined
  }

  async setLoggingLevel(level: LoggingLevel, options: RequestOptions): Promise<void> {
    await this.request(
      `logging/setLevel ${level}`,
      (o) => (this.logging ? this.session.setLoggingLevel(level, o) : Promise.reject(new McpRequestError("protocol", "the server does not offer logging", -32601))),
      options
    )
  }

  onLogMessage(listener: (message: LoggingMessageNotification["params"]) => void): () => void {
    this.logListeners.add(listener)
    return () => this.logListeners.delete(listener)
  }

  get capabilities(): CatalogCapabilities {
    const declared = this.session.serverCapabilities
    return {
      resources: declared?.resources !== undefined,
      subscribe: declared?.resources?.subscribe === true,
      prompts: declared?.prompts !== undefined,
      completions: declared?.completions !== undefined
    }
  }

  get serverInfo(): { readonly name: string; readonly version: string } | undefined {
    return this.session.serverInfo
  }

  get protocolVersion(): string | undefined {
    return this.session.protocolVersion
  }

  private verdict: EraVerdict | undefined

  get era(): EraVerdict | undefined {
    const version = this.session.protocolVersion
    if (version === undefined) return undefined
    const discover = this.session.discovery
    this.verdict ??= this.session.modern && discover !== undefined ? { kind: "modern", version, discover } : { kind: "legacy", version }
    return this.verdict
  }

  /** Why the modern era's subscriptions/listen stream showed the server gone, once it did. */
  private listenLost: string | undefined
  private listenTimer: NodeJS.Timeout | undefined
  /** Cancels the subscriptions/listen open now (to open one with another filter). */
  private listening: Cancel | undefined
  /** The resources subscribed to (modern era: they go in the listen filter). */
  private readonly watched = new Set<string>()
  /** What the upstream's last lists said of their freshness (`ttlMs`, modern era only). */
  listTtlMs: ListTtl | undefined = undefined

  /**
   * The modern era's change notifications (tools, prompts, resources: what the server declared it
   * announces): one `subscriptions/listen`, whose notifications reach the listeners as the 2025 era's
   * do. When it ends it is opened again (at once, or after a second when it lasted less); a reopening
   * that cannot reach the server closes the connection, so the service reconnects now; a server
   * that refuses it (a JSON-RPC error) announces nothing, and the tools interval refreshes the lists.
   */
  listen(): void {
    clearTimeout(this.listenTimer)
    this.listening?.abort()
    this.listening = undefined
    if (this.closedByUs || this.selfCloseReason !== undefined) return
    const caps = this.session.serverCapabilities
    const filter = {
      ...(caps?.tools?.listChanged === true ? { toolsListChanged: true } : {}),
      ...(caps?.prompts?.listChanged === true ? { promptsListChanged: true } : {}),
      ...(caps?.resources?.listChanged === true ? { resourcesListChanged: true } : {}),
      ...(caps?.resources?.subscribe === true && this.watched.size > 0 ? { resourceSubscriptions: [...this.watched] } : {})
    }
    if (Object.keys(filter).length === 0) return
    const openedAt = performance.now()
    const cancel = (this.listening = new Cancel())
    const again = () => {
      if (this.closedByUs || this.selfCloseReason !== undefined || cancel.aborted) return
      this.listenTimer = setTimeout(() => this.listen(), performance.now() - openedAt >= 1_000 ? 0 : 1_000)
    }
    this.session.listen(filter, cancel).then(again, (error: unknown) => {
      if (this.closedByUs || this.selfCloseReason !== undefined || cancel.aborted) return
      if (isConnectionClosed(error)) return again()
      if (error instanceof ProtocolError || error instanceof SdkError) return
      if (error instanceof McpRequestError) return
      this.listenLost = `the subscriptions/listen stream could not be opened: ${error instanceof Error ? error.message : String(error)}`
      void this.session.close()
    })
  }

  get pid(): number | undefined {
    return this.opened.type === "stdio" ? this.opened.transport.pid : undefined
  }

  /**
   * Runs one request through `mcpRequest`. A transport failure on a connection that a message
   * over the size limit ended is that failure: `message_too_large`.
   */
  async request<T>(what: string, run: (controls: RequestControls) => Promise<T>, options: RequestOptions): Promise<T> {
    try {
      return await mcpRequest(what, run, options)
    } catch (error) {
      throw this.named(what, error)
    }
  }

  /** The same for a request the session bounds itself (tools/call, ping: no timer or signal of the wrapper's own). */
  private async bounded<T>(what: string, run: (timeoutMs: number, signal: CancelSignal | undefined) => Promise<T>, options: CallOptions): Promise<T> {
    try {
      return await mcpBoundedRequest(what, run, options)
    } catch (error) {
      throw this.named(what, error)
    }
  }

  /** A transport failure on a connection that a message over the size limit ended is that failure. */
  private named(what: string, error: unknown): unknown {
    const tooLarge = this.tooLarge
    if (tooLarge === undefined || !(error instanceof McpRequestError) || error.kind !== "transport") return error
    return new McpRequestError("message_too_large", `${what}: ${tooLarge.message}`)
  }

  async ping(options: CallOptions): Promise<number> {
    const started = performance.now()
    await this.bounded("ping", (timeout, signal) => this.session.ping({ timeout, signal }), options)
    return performance.now() - started
  }

  listTools(options: RequestOptions): Promise<ReadonlyArray<ToolInfo>> {
    return this.request(
      "tools/list",
      async (controls) => {
        const ttl = new LeastTtl(this.session.modern)
        let listed = printableNamed((text, count) => this.warn(text, "tool_rejected", { count }), await paginate("tools/list", controls, (params, o) => this.session.listTools(params, o).then(ttl.note), (r) => r.tools))
        if (this.opened.type === "streamable_http" && this.session.modern) listed = this.withParamHeaders(listed, this.opened.transport)
        this.session.setTools(listed)
        this.listTtlMs = { tools: ttl.ms, catalog: this.listTtlMs?.catalog }
        return listed.map(toToolInfo)
      },
      options
    )
  }

  /**
   * The modern era over Streamable HTTP: the tools' `x-mcp-header` parameters go to the transport
   * (mirrored into their calls' headers); a tool whose annotations break the spec's rules is left
   * out of the list, with a warning, as the spec requires.
   */
  private withParamHeaders<T extends { readonly name: string; readonly inputSchema: unknown }>(tools: ReadonlyArray<T>, transport: HttpClientTransport): Array<T> {
    const marked = new Map<string, ReadonlyArray<ParamHeader>>()
    const kept: Array<T> = []
    for (const tool of tools) {
      const found = paramHeadersOf(tool.inputSchema)
      if ("invalid" in found) {
        this.warn(`tool ${JSON.stringify(tool.name)} left out: ${found.invalid}`, "tool_rejected")
        continue
      }
      if (found.headers.length > 0) marked.set(tool.name, found.headers)
      kept.push(tool)
    }
    transport.setParamHeaders(marked)
    return kept
  }

  listCatalog(options: RequestOptions): Promise<Catalog> {
    const { resources, prompts } = this.capabilities
    if (!resources && !prompts) return Promise.resolve(EMPTY_CATALOG)
    // One time-out for the three lists together, as for a tools/list of many pages.
    return this.request(
      "resources/list, resources/templates/list and prompts/list",
      async (controls) => {
        const ttl = new LeastTtl(this.session.modern)
        const catalog: Catalog = {
          resources: resources
            ? await paginate("resources/list", controls, (params, o) => this.session.listResources(params, o).then(ttl.note), (r) => r.resources)
            : [],
          resourceTemplates: resources
            ? await paginate("resources/templates/list", controls, (params, o) => this.session.listResourceTemplates(params, o).then(ttl.note), (r) => r.resourceTemplates)
            : [],
          prompts: prompts ? await paginate("prompts/list", controls, (params, o) => this.session.listPrompts(params, o).then(ttl.note), (r) => r.prompts) : []
        }
        this.listTtlMs = { tools: this.listTtlMs?.tools, catalog: ttl.ms }
        return catalog
      },
      options
    )
  }

  readResource(uri: string, options: InputRequestOptions): Promise<ReadResourceResult> {
    return this.request(`resources/read ${JSON.stringify(uri)}`, (o) => this.declared("resources", () => this.session.readResource(uri, o, options.hooks, options.meta)), options)
  }

  getPrompt(name: string, args: Record<string, string>, options: InputRequestOptions): Promise<GetPromptResult> {
    return this.request(
      `prompts/get ${JSON.stringify(name)}`,
      (o) => this.declared("prompts", () => this.session.getPrompt(name, args, o, options.hooks, options.meta)),
      options
    )
  }

  complete(params: CompleteParams, options: RequestOptions): Promise<CompleteResult> {
    return this.request("completion/complete", (o) => this.declared("completions", () => this.session.complete(params, o, options.meta)), options)
  }

  async subscribeResource(uri: string, options: RequestOptions): Promise<void> {
    if (this.session.modern) return this.declared("subscribe", async () => this.watch(uri, true))
    await this.request(`resources/subscribe ${JSON.stringify(uri)}`, (o) => this.declared("subscribe", () => this.session.subscribeResource(uri, o)), options)
  }

  async unsubscribeResource(uri: string, options: RequestOptions): Promise<void> {
    if (this.session.modern) return this.declared("subscribe", async () => this.watch(uri, false))
    await this.request(
      `resources/unsubscribe ${JSON.stringify(uri)}`,
      (o) => this.declared("subscribe", () => this.session.unsubscribeResource(uri, o)),
      options
    )
  }

  /**
   * The modern era has no resources/subscribe: a resource's updates are asked for in the filter of
   * subscriptions/listen, opened again with the new filter (the old one cancelled).
   */
  private watch(uri: string, on: boolean): void {
    if (on === this.watched.has(uri)) return
    if (on) this.watched.add(uri)
    else this.watched.delete(uri)
    if (this.connected) this.listen()
  }

  onResourceUpdated(listener: (uri: string) => void): () => void {
    this.updatedListeners.add(listener)
    return () => this.updatedListeners.delete(listener)
  }

  onCatalogChanged(listener: () => void): () => void {
    this.catalogListeners.add(listener)
    return () => this.catalogListeners.delete(listener)
  }

  /** Runs a request only if the server declared the capability it needs: a server is never asked for what it does not offer. */
  private declared<T>(capability: keyof CatalogCapabilities, run: () => Promise<T>): Promise<T> {
    if (this.capabilities[capability]) return run()
    const what = capability === "subscribe" ? "resource subscriptions" : capability
    return Promise.reject(new McpRequestError("protocol", `the server does not offer ${what}`, -32601))
  }

  callTool(name: string, args: Record<string, unknown>, options: CallOptions): Promise<CallToolResult> {
    return this.bounded(`tools/call ${JSON.stringify(name)}`, (timeout, signal) => this.session.callTool(name, args, { timeout, signal }, options.hooks, options.meta), options)
  }

  startToolCall(name: string, args: Record<string, unknown>, options: CallOptions): Promise<CallToolResult | UpstreamTask> {
    return this.bounded(`tools/call ${JSON.stringify(name)}`, (timeout, signal) => this.session.startToolCall(name, args, { timeout, signal }, options.hooks, options.meta), options)
  }

  followTask(taskId: string, options: CallOptions): Promise<CallToolResult> {
    return this.bounded("tasks/get", (timeout, signal) => this.session.followTask(taskId, { timeout, signal }, options.hooks), options)
  }

  taskRequest(method: TaskMethod, params: Record<string, unknown>, options: RequestOptions): Promise<Record<string, unknown>> {
    return this.request(method, (o) => this.session.taskRequest(method, params, o, options.meta), options)
  }

  close(): Promise<void> {
    this.closing ??= this.shutDown()
    return this.closing
  }

  onClose(listener: (reason: string) => void): () => void {
    const reason = this.selfCloseReason
    if (reason !== undefined) {
      // Already closed by itself: tell a late subscriber at once rather than never.
      queueMicrotask(() => listener(reason))
      return () => {}
    }
    this.closeListeners.add(listener)
    return () => this.closeListeners.delete(listener)
  }

  onToolsChanged(listener: () => void): () => void {
    this.toolsListeners.add(listener)
    return () => this.toolsListeners.delete(listener)
  }

  stderrTail(): ReadonlyArray<string> {
    return this.opened.type === "stdio" ? this.opened.transport.stderrTail() : []
  }

  private async shutDown(): Promise<void> {
    this.closedByUs = true
    clearTimeout(this.listenTimer)
    this.listening?.abort()
    this.closeListeners.clear()
    if (this.settle !== undefined) await settledWithin(this.session.inFlightSettled(), this.settle.withinMs, this.settle.signal)
    // The requests in flight given up, the server told, while its session still exists.
    await this.session.abandon().catch(() => {})
    if (this.opened.type === "streamable_http") {
      // Closing the transport sends no DELETE; ending the session is our job, and must not hold up the close.
      await withTimeout(this.opened.transport.terminateSession(), TERMINATE_SESSION_TIMEOUT_MS)
    }
    await this.session.close().catch(() => {})
  }

  /**
   * An SSE service's session lives as long as its GET stream: once the stream has ended (the event
   * source's error: the server closed it, the connection broke, a reconnection was refused), the
   * endpoint it named is gone, whatever a new stream might offer. The transport is closed at once
   * (not reopened by the event source), so the service reconnects now rather than at a failed ping.
   */
  private sseEnded(error: SseError, transport: SSEClientTransport): void {
    if (this.closedByUs || this.sseStreamEnded !== undefined) return
    const detail = error.message.replace(/^SSE error: /, "")
    this.sseStreamEnded = `the SSE stream ended${error.code !== undefined ? ` (HTTP ${error.code})` : ""}${detail !== "" && detail !== "undefined" ? `: ${detail}` : ""}`
    void transport.close()
  }

  private onTransportClosed(): void {
    clearTimeout(this.listenTimer)
    if (this.closedByUs || this.selfCloseReason !== undefined) return
    const reason =
      this.listenLost ??
      (this.tooLarge !== undefined
        ? `the server sent a message too large: ${this.tooLarge.message}`
        : this.opened.type === "stdio"
          ? closeReasonOfProcess(this.opened.transport)
          : this.opened.type === "sse"
            ? (this.sseStreamEnded ?? "the SSE stream closed")
            : (this.opened.transport.streamLostReason ?? "the connection closed"))
    this.selfCloseReason = reason
    const listeners = [...this.closeListeners]
    this.closeListeners.clear()
    for (const listener of listeners) listener(reason)
  }
}

const openTransport = (
  def: ResolvedDefinition,
  maxMessageBytes: number,
  policy: UpstreamPolicy,
  auth: UpstreamAuth | undefined,
  ledger: ProcessLedger | undefined,
  /** SDK v2's SSE client transport, loaded for an SSE service (`clientPackage`). */
  sse: SSEClientTransportClass | undefined
): Opened => {
  if (def.kind === "local") {
    return {
      type: "stdio",
      transport: new StdioProcessTransport({ command: def.command, args: def.args, env: def.env, cwd: def.cwd, maxMessageBytes, ledger })
    }
  }
  const url = new URL(def.url)
  if (def.transport !== "sse" || sse === undefined) {
    return { type: "streamable_http", transport: new HttpClientTransport(url, def.headers, { maxMessageBytes, auth, lookup: policy.lookup }) }
  }
  let authorizationRequired: AuthorizationRequiredError | undefined
  const fetch = boundedFetch({
    maxMessageBytes,
    // The host is resolved and checked before each request; the service's bearer token is added (src/mcp/oauth-client.ts).
    fetch: auth === undefined ? policy.fetch : fetchWithAuth(policy.fetch, auth, (error) => void (authorizationRequired ??= error)),
    errorBodyBytes: ERROR_BODY_BYTES,
    onTooLarge: (error) => {
      // Reported as the other transports do, then closed once the event source has seen its body
      // fail (it rejects a start still waiting for the endpoint), so that it does not reconnect.
      transport.onerror?.(error)
      setImmediate(() => void transport.close())
    }
  })
  const transport: SSEClientTransport = new sse(url, { requestInit: { headers: { ...def.headers } }, fetch })
  return { type: "sse", transport, authorizationRequired: () => authorizationRequired }
}

/**
 * A connect failure that retrying soon cannot mend, with what to do about it; undefined for the
 * others (a refused connection, a time-out, a process that exited: all may pass).
 */
export const permanentFailure = (
  def: ResolvedDefinition,
  failure: McpRequestError,
  spawnError: Error | undefined,
  /** The transport the URL was found to speak instead (`otherTransport`), if any. */
  speaks?: "sse" | "streamable_http" | undefined
): { readonly message: string; readonly hint: string } | undefined => {
  if (def.kind === "local") {
    const code = (spawnError as NodeJS.ErrnoException | undefined)?.code
    if (spawnError === undefined || (code !== "ENOENT" && code !== "EACCES" && code !== "ENOTDIR")) return undefined
    const message = failure.message.split("\n", 1)[0] as string
    if (/working directory .* does not exist/.test(spawnError.message)) {
      return { message, hint: `the working directory "cwd" does not exist: create it or fix "cwd"` }
    }
    if (code === "ENOENT" && def.args.length === 0 && /\s/.test(def.command.trim())) {
      const [program, ...rest] = def.command.trim().split(/\s+/)
      return {
        message,
        hint: `command contains spaces: put the arguments in "args" (e.g. "command": ${JSON.stringify(program)}, "args": ${JSON.stringify(rest)})`
      }
    }
    if (code === "EACCES") return { message, hint: `${JSON.stringify(def.command)} cannot be run: check that it is an executable file (chmod +x)` }
    return {
      message,
      hint: def.command.includes("/")
        ? `no executable at ${JSON.stringify(def.command)}: check the path`
        : `executable ${JSON.stringify(def.command)} not found on the store's PATH: install it or give its full path`
    }
  }
  if (failure.message.includes("upstream refused: ")) return { message: failure.message, hint: UPSTREAM_HINT }
  const status = failure.httpStatus
  if (speaks === "sse" && def.transport !== "sse") {
    return {
      message: `${def.url} is an SSE endpoint: its POST was refused (HTTP ${status}) and a GET opens an event stream`,
      hint: `use the SSE transport: set "transport": "sse"`
    }
  }
  if (speaks === "streamable_http" && def.transport === "sse") {
    return {
      message: `${def.url} is a Streamable HTTP endpoint: it refused the SSE stream (HTTP ${status}) and answers a JSON-RPC POST`,
      hint: `use Streamable HTTP: set "transport": "streamable_http" (or drop "transport")`
    }
  }
  if (status === 404) {
    return {
      message: `no MCP endpoint at ${def.url} (HTTP 404)`,
      hint: `check the URL's path (MCP servers usually serve ${def.transport === "sse" ? "/sse" : "/mcp"})`
    }
  }
  if (status === 405) {
    return {
      message: `${describeTarget(def)}: the first initialize was answered HTTP 405 (method not allowed)`,
      hint:
        def.transport === "sse"
          ? `the URL does not serve an SSE stream: check its path, or drop "transport": "sse" for a Streamable HTTP server`
          : `the URL does not take MCP requests: if it is an SSE server, set "transport": "sse"; otherwise check its path`
    }
  }
  return undefined
}

/**
 * After a first connect refused with a status a wrong `transport` explains (a Streamable HTTP POST
 * answered 404 or 405, an SSE GET answered 400, 404, 405 or 406), asks the URL once whether it speaks
 * the other transport (src/mcp/probe.ts, bounded by its own time-out).
 */
const otherTransport = async (def: ResolvedDefinition, failure: McpRequestError): Promise<"sse" | "streamable_http" | undefined> => {
  if (def.kind !== "remote" || failure.httpStatus === undefined) return undefined
  const status = failure.httpStatus
  if (def.transport !== "sse" && (status === 404 || status === 405)) return probeTransport(def.url, def.headers, "sse")
  if (def.transport === "sse" && [400, 404, 405, 406].includes(status)) return probeTransport(def.url, def.headers, "streamable_http")
  return undefined
}

/** A hint from a local process's last stderr lines, for failures that are not permanent. */
const stdioHint = (tail: ReadonlyArray<string>): string | undefined => {
  const text = tail.slice(-STDERR_LINES_IN_ERRORS).join("\n")
  if (/npm (ERR!|error) (code E404|404)/.test(text)) return "npm cannot find the package: check its name (and version) in \"args\""
  if (/command not found|not found: /.test(text) && /^sh: |: not found$/m.test(text)) return "a program the command runs is not installed"
  return undefined
}

/** The service as a message names it, its secrets masked (src/domain/secrets.ts). */
const describeTarget = (def: ResolvedDefinition): string =>
  def.kind === "local"
    ? `stdio service (${[def.command, ...maskArgs(def.args)].join(" ")})`
    : `${def.transport === "sse" ? "SSE" : "Streamable HTTP"} service at ${maskUrl(def.url)}`

/**
 * The listed tools but those whose names hold a control character, left out with one warning per
 * list (a few of their names quoted, cut): no client could type or show them, and the store's own
 * bookkeeping keys (the tool pins' definition digest) are names no tool can have for that reason.
 */
const printableNamed = <T extends { readonly name: string }>(warn: (text: string, count: number) => void, tools: Array<T>): Array<T> => {
  const kept: Array<T> = []
  const named: Array<string> = []
  for (const tool of tools) {
    if (!/[\u0000-\u001f\u007f]/.test(tool.name)) kept.push(tool)
    else if (named.push(JSON.stringify(tool.name.slice(0, 100))) > 3) named.length = 3
  }
  const left = tools.length - kept.length
  if (left > 0) warn(`${left} tool(s) left out: their names hold a control character (${named.join(", ")}${left > 3 ? ", ..." : ""})`, left)
  return kept
}

/** Every MCP field of a listed tool, unchanged (the optional ones only when the server sent them). */
const toToolInfo = (tool: {
  name: string
  title?: string | undefined
  description?: string | undefined
  inputSchema: Record<string, unknown>
  outputSchema?: Record<string, unknown> | undefined
  annotations?: Record<string, unknown> | undefined
  execution?: Record<string, unknown> | undefined
  _meta?: Record<string, unknown> | undefined
}): ToolInfo => ({
  name: tool.name,
  ...(tool.title !== undefined ? { title: tool.title } : {}),
  description: tool.description ?? "",
  inputSchema: tool.inputSchema,
  ...(tool.outputSchema !== undefined ? { outputSchema: tool.outputSchema } : {}),
  ...(tool.annotations !== undefined ? { annotations: tool.annotations } : {}),
  ...(tool.execution !== undefined ? { execution: tool.execution } : {}),
  ...(tool._meta !== undefined ? { _meta: tool._meta } : {})
})

/**
 * The least `ttlMs` of a list's pages (a list is as fresh as its stalest page), noted only in the
 * 2026-07-28 era: a 2025 server's stray field means nothing. A negative one counts as 0, as the
 * revision says; one that is not a number is ignored.
 */
class LeastTtl {
  ms: number | undefined = undefined
  constructor(private readonly modern: boolean) {}
  readonly note = <R>(result: R): R => {
    const ttl = (result as { readonly ttlMs?: unknown }).ttlMs
    if (this.modern && typeof ttl === "number" && Number.isFinite(ttl)) this.ms = Math.min(this.ms ?? Infinity, Math.max(0, ttl))
    return result
  }
}

/**
 * Pages through a list request: follows `nextCursor` until the last page, refusing a repeated
 * cursor, more than MAX_LIST_PAGES pages and more than MAX_LIST_CHARACTERS of items and cursors (a
 * misbehaving server that never ends its list). A single page is bounded by the message size
 * limit: only lists of several pages are measured.
 */
const paginate = async <R extends { readonly nextCursor?: string | undefined }, I>(
  what: string,
  controls: RequestControls,
  page: (params: { cursor?: string }, options: RequestControls) => Promise<R>,
  items: (result: R) => ReadonlyArray<I>
): Promise<Array<I>> => {
  const all: Array<I> = []
  const seen = new Set<string>()
  let cursor: string | undefined
  let characters = 0
  for (let n = 0; n < MAX_LIST_PAGES; n++) {
    const result = await page(cursor === undefined ? {} : { cursor }, controls)
    const found = items(result)
    for (const item of found) all.push(item)
    cursor = result.nextCursor
    if (cursor === undefined) return all
    characters += JSON.stringify(found).length + cursor.length
    if (characters > MAX_LIST_CHARACTERS) throw new McpRequestError("protocol", `${what}: its pages bring more than ${MAX_LIST_CHARACTERS / 1024 / 1024} MiB`)
    if (seen.has(cursor)) throw new McpRequestError("protocol", `${what}: the server repeated the cursor ${JSON.stringify(cursor)}`)
    seen.add(cursor)
  }
  throw new McpRequestError("protocol", `${what}: more than ${MAX_LIST_PAGES} pages`)
}

const closeReasonOfProcess = (transport: StdioProcessTransport): string => {
  const last = transport.stderrTail().at(-1)
  return `the process ${describeExit(transport.exit)}${last !== undefined && last !== "" ? ` (last stderr line: ${last})` : ""}`
}

const withProcessReport = (message: string, transport: StdioProcessTransport, endedByItself: boolean): string => {
  // A process that never started has neither an exit code nor stderr: the spawn error says it all.
  if (transport.exit?.kind === "spawn_failed") return message
  const lines: Array<string> = [message]
  if (endedByItself) lines.push(`The process ${describeExit(transport.exit)}.`)
  const tail = transport.stderrTail().slice(-STDERR_LINES_IN_ERRORS)
  lines.push(tail.length > 0 ? `Last stderr lines:\n${tail.map((l) => `  ${l}`).join("\n")}` : "It wrote nothing to stderr.")
  return lines.join("\n")
}

const withTimeout = async (promise: Promise<unknown>, ms: number): Promise<void> => {
  let timer: NodeJS.Timeout | undefined
  await Promise.race([
    promise.catch(() => {}),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms)
    })
  ])
  clearTimeout(timer)
}
