/**
 * The contract between the service actors and a live MCP connection. The machines only ever see
 * these types; src/mcp implements them over the SDK's transports.
 */
import type {
  CallToolResult,
  CompleteRequest,
  CompleteResult,
  GetPromptResult,
  LoggingLevel,
  LoggingMessageNotification,
  Prompt,
  ReadResourceResult,
  Resource,
  ResourceTemplateType as ResourceTemplate
} from "@modelcontextprotocol/client"
import type { CancelSignal } from "../domain/cancellation.js"
import type { EraVerdict } from "./era.js"
import type { UpstreamAuth } from "./oauth-client.js"
import type { UpstreamPolicy } from "./upstream-policy.js"

/**
 * A tool as its server lists it (name unchanged), every MCP field kept as the server sent it (the
 * objects themselves, not copies: they are bounded by the message-size cap and never mutated).
 */
export interface ToolInfo {
  readonly name: string
  readonly title?: string
  readonly description: string
  readonly inputSchema: Record<string, unknown>
  readonly outputSchema?: Record<string, unknown>
  readonly annotations?: Record<string, unknown>
  /** MCP's `execution` (`taskSupport`: "forbidden" | "optional" | "required"). */
  readonly execution?: Record<string, unknown>
  readonly _meta?: Record<string, unknown>
}

/**
 * A resource, a resource template and a prompt as the server lists them: the SDK's objects as
 * parsed, every field kept, bounded by the message-size cap and never mutated.
 */
export type ResourceInfo = Resource
export type ResourceTemplateInfo = ResourceTemplate
export type PromptInfo = Prompt

/** What the server declared it offers beside tools (from its initialize answer). */
export interface CatalogCapabilities {
  readonly resources: boolean
  /** `resources.subscribe`: the server takes resources/subscribe. */
  readonly subscribe: boolean
  readonly prompts: boolean
  readonly completions: boolean
}

/** The resources, resource templates and prompts of a service (empty when it declares none). */
export interface Catalog {
  readonly resources: ReadonlyArray<ResourceInfo>
  readonly resourceTemplates: ReadonlyArray<ResourceTemplateInfo>
  readonly prompts: ReadonlyArray<PromptInfo>
}

export const EMPTY_CATALOG: Catalog = { resources: [], resourceTemplates: [], prompts: [] }

/** The `ttlMs` of an upstream's last lists (see `McpConnection.listTtlMs`). */
export interface ListTtl {
  readonly tools: number | undefined
  readonly catalog: number | undefined
}

/** `completion/complete`'s params, as MCP defines them. */
export type CompleteParams = CompleteRequest["params"]

/** Options every MCP request takes: a time-out and an optional abort signal. */
export interface RequestOptions {
  readonly timeoutMs: number
  readonly signal?: AbortSignal | undefined
  /**
   * Entries of the request's `_meta` from the caller's side (the trace context of the store's span
   * of the request): taken by resources/read, prompts/get, completion/complete and the tasks
   * requests, as a tool call's `CallOptions.meta`.
   */
  readonly meta?: Readonly<Record<string, string>> | undefined
}

/** One `notifications/progress` of a call, as the upstream sent it (its token aside). */
export interface CallProgress {
  readonly progress: number
  readonly total?: number | undefined
  readonly message?: string | undefined
}

/**
 * What the caller of a request that may need input (a tool call, a resource read, a prompt) hears
 * of it while it runs (src/mcp/session.ts).
 */
export interface CallHooks {
  /**
   * Each `notifications/progress` the upstream sends for the call: with it the request carries a
   * `progressToken`, and every progress restarts the call's time-out (never past `maxTotalMs`).
   */
  readonly onProgress?: ((progress: CallProgress) => void) | undefined
  /** The longest the call may last however often its time-out restarts (ms from its start). */
  readonly maxTotalMs?: number | undefined
  /**
   * Answers the upstream's requests tied to the request (`elicitation/create`,
   * `sampling/createMessage`): the client that made it does; it throws to decline.
   */
  readonly relay?: UpstreamRequestRelay | undefined
  /**
   * Told the upstream's task id when the call is followed as a task (`followTask` finds it again).
   * With it, a call aborted with `STORE_STOPPING` as the reason leaves its task running upstream,
   * for the caller to follow again after the restart; without it, the task is cancelled.
   */
  readonly onTask?: ((taskId: string) => void) | undefined
}

/**
 * The reason a call is cancelled with when its store stops under it (an asynchronous call): its
 * record says `interrupted`, not `cancelled`, and a task it follows for a caller that follows it
 * again (`CallHooks.onTask`) is left running upstream.
 */
export const STORE_STOPPING: unknown = Object.freeze({ reason: "the store stopped while the call ran" })

/** The options of a resources/read or prompts/get: those of any request, and the relay of the upstream's requests for input. */
export interface InputRequestOptions extends RequestOptions {
  readonly hooks?: Pick<CallHooks, "relay"> | undefined
}

/** An upstream's request during a call, relayed to the call's caller (see `CallHooks.relay`). */
export type UpstreamRequestRelay = (
  request: { readonly method: string; readonly params?: Record<string, unknown> | undefined },
  options: { readonly signal: AbortSignal; readonly timeoutMs: number }
) => Promise<Record<string, unknown>>

/** The upstream requests a call's caller may answer (`CallHooks.relay`). */
export const RELAYED_METHODS: ReadonlySet<string> = new Set(["elicitation/create", "sampling/createMessage"])

/**
 * What a transport tells of a message it read on a request's own stream (the Streamable HTTP POST
 * that carried the request): the ids of the requests that stream carries, so an upstream request
 * read there is tied to that call. Passed as the `extra` of `onmessage`.
 */
export interface CarriedBy {
  readonly carriedBy: ReadonlySet<string | number>
}

/**
 * What a transport tells of an answer it lost: the stream that was to carry it ended first (a
 * Streamable HTTP POST's event stream that cannot be resumed). The message it comes with is an error
 * answer in the request's name; the engine fails the request as on a closed connection.
 */
export interface AnswerLost {
  readonly lost: true
}

/**
 * What a transport tells of an answer it could not read as a message (a stdio line with a request's
 * id that is not valid JSON-RPC, such as an `error` that is not an error object): the engine fails
 * that request as a protocol error saying why, instead of leaving it to its time-out.
 */
export interface AnswerMalformed {
  readonly malformed: string
}

/** The options of a tool call: a time-out and an optional signal, an AbortSignal or a `Cancel`. */
export interface CallOptions {
  readonly timeoutMs: number
  readonly signal?: CancelSignal | undefined
  readonly hooks?: CallHooks | undefined
  /** Entries of the request's `_meta` from the caller's side (the call's trace context). */
  readonly meta?: Readonly<Record<string, string>> | undefined
}

/** The tasks extension's identifier (2026-07-28): declared by the store as a client and as a server. */
export const TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

/** The extension's requests on a task. */
export type TaskMethod = "tasks/get" | "tasks/update" | "tasks/cancel"
export const TASK_METHODS: ReadonlySet<string> = new Set<TaskMethod>(["tasks/get", "tasks/update", "tasks/cancel"])

/**
 * A server's task handle for a tool call: the task as the server created it (`taskId`, `status`,
 * `pollIntervalMs`...; 2025-11-25's experimental tasks: `pollInterval`).
 */
export class UpstreamTask {
  constructor(readonly task: Readonly<Record<string, unknown>> & { readonly taskId: string; readonly status: string }) {}
}

/**
 * How an MCP request failed:
 * - `transport`: the connection broke or could not be made (process exited, socket refused, stream ended);
 * - `session_expired`: the server no longer knows the session (Streamable HTTP 404); reconnect and retry;
 * - `protocol`: the server answered with a JSON-RPC error (`code` is set; -32602 means invalid params);
 * - `timeout`: no answer within the time-out;
 * - `aborted`: the caller's signal fired;
 * - `message_too_large`: the server sent a message over the connection's size limit; the
 *   connection was closed (it cannot be read past such a message), so the service reconnects.
 */
/** How a request failed. `unavailable`: the cluster could not bring it to a replica that runs the service (nothing ran). */
export type FailureKind = "transport" | "session_expired" | "protocol" | "timeout" | "aborted" | "message_too_large" | "unavailable"

export { DEFAULT_MAX_MESSAGE_BYTES, MessageTooLargeError } from "./message-limit.js"

/**
 * An HTTP failure of the store's Streamable HTTP transport (src/mcp/http-transport.ts): `code` is the
 * answer's status, or -1 when the answer was not one the transport can read. Its message reads as
 * SDK 1.x's `StreamableHTTPError` wrote it, which the failures the store reports have quoted since
 * its first release.
 */
export class StreamableHttpError extends Error {
  readonly _tag = "StreamableHttpError"
  constructor(
    readonly code: number,
    message: string
  ) {
    super(`Streamable HTTP error: ${message}`)
  }
}

/** What more is known about a failure than its kind. */
export interface FailureDetails {
  /**
   * Retrying soon cannot help (an executable that does not exist, a URL with no MCP endpoint): the
   * service goes `unreachable` at once and retries only on the slow unreachable cadence.
   */
  readonly permanent?: boolean | undefined
  /** What the user can do about it, e.g. `command contains spaces: put the arguments in "args"`. */
  readonly hint?: string | undefined
  /** The HTTP status of the answer that failed the request, when there was one. */
  readonly httpStatus?: number | undefined
  /** The upstream wants an OAuth authorization that only a user can give (src/mcp/oauth-client.ts). */
  readonly authorizationRequired?: boolean | undefined
}

/** The one error type that every MCP request fails with. */
export class McpRequestError extends Error {
  readonly _tag = "McpRequestError"
  readonly permanent: boolean
  readonly hint: string | undefined
  readonly httpStatus: number | undefined
  readonly authorizationRequired: boolean
  constructor(
    readonly kind: FailureKind,
    message: string,
    readonly code?: number,
    readonly data?: unknown,
    details: FailureDetails = {}
  ) {
    super(message)
    this.permanent = details.permanent === true
    this.hint = details.hint
    this.httpStatus = details.httpStatus
    this.authorizationRequired = details.authorizationRequired === true
  }
}

/** A live connection to one MCP server. Owned by exactly one service actor. */
export interface McpConnection {
  readonly transportType: "streamable_http" | "sse" | "stdio"
  /**
   * Makes the next close let the requests then in flight (health checks aside) end first, for at
   * most `withinMs` or until `signal` fires, before it gives up the rest: a hand-over sets it just
   * before the service moves, so a call that began here ends here. Absent: not followed here.
   */
  settleOnClose?(withinMs: number, signal?: AbortSignal): void
  /** Server name/version from the initialize handshake (2025 era) or server/discover (modern era). */
  readonly serverInfo: { readonly name: string; readonly version: string } | undefined
  /** The protocol revision spoken with the server (negotiated or pinned). */
  readonly protocolVersion: string | undefined
  /** The era found, for the owner to hand back as `ConnectOptions.prior` on its next connect. */
  readonly era: EraVerdict | undefined
  /** The health check: MCP ping (2025 era) or server/discover (modern era); resolves with the round-trip time in milliseconds. */
  ping(options: CallOptions): Promise<number>
  /**
   * Replica mode, a connection to the replica that runs the service (src/cluster/forward.ts): the
   * same connection, its requests made for a principal (a `per_user` service's caller), which that
   * replica runs on the principal's own connection. Absent on a connection to the upstream itself.
   */
  forPrincipal?(principal: string): McpConnection
  /** Lists every tool (follows pagination cursors). */
  listTools(options: RequestOptions): Promise<ReadonlyArray<ToolInfo>>
  /**
   * How long the upstream said its last lists stay fresh (2026-07-28 era: `ttlMs`, the least of
   * their pages'; 0 for a negative one): `tools` from the last listTools, `catalog` from the last
   * listCatalog (the least of its three lists). Undefined when it said nothing (the 2025 era).
   */
  readonly listTtlMs?: ListTtl | undefined
  /**
   * Calls a tool. A result with `isError: true` resolves normally; only request failures reject. A
   * call the server runs as a task (the tasks extension; 2025-11-25's tasks) is followed to its result.
   */
  callTool(name: string, args: Record<string, unknown>, options: CallOptions): Promise<CallToolResult>
  /**
   * Calls a tool for a caller that follows a task itself: a modern server's task handle resolves as
   * an `UpstreamTask`, anything else as `callTool`.
   */
  startToolCall(name: string, args: Record<string, unknown>, options: CallOptions): Promise<CallToolResult | UpstreamTask>
  /**
   * A request of the tasks extension on a task of the server (tasks/get, tasks/update,
   * tasks/cancel): the server's answer (without `resultType`), or its JSON-RPC error (`protocol`).
   */
  taskRequest(method: TaskMethod, params: Record<string, unknown>, options: RequestOptions): Promise<Record<string, unknown>>
  /**
   * Follows again a task of a call made earlier (by the store before a restart: the id `onTask`
   * told), to the call's result, as `callTool` follows one.
   */
  followTask(taskId: string, options: CallOptions): Promise<CallToolResult>
  /** What the server declared beside tools; nothing is asked of it that it did not declare. */
  readonly capabilities: CatalogCapabilities
  /**
   * Lists resources, resource templates and prompts (each following cursors, bounded as tools/list
   * is); a kind the server did not declare is empty and never asked for.
   */
  listCatalog(options: RequestOptions): Promise<Catalog>
  /**
   * resources/read (rejects `protocol` when the server did not declare resources); the server's
   * requests for input during it go to `hooks.relay`, as a tool call's do (declined without one).
   */
  readResource(uri: string, options: InputRequestOptions): Promise<ReadResourceResult>
  /** prompts/get; input as for readResource. */
  getPrompt(name: string, args: Record<string, string>, options: InputRequestOptions): Promise<GetPromptResult>
  /** completion/complete. */
  complete(params: CompleteParams, options: RequestOptions): Promise<CompleteResult>
  /** resources/subscribe and resources/unsubscribe. */
  subscribeResource(uri: string, options: RequestOptions): Promise<void>
  unsubscribeResource(uri: string, options: RequestOptions): Promise<void>
  /** Called on `notifications/resources/updated` with the URI. Returns an unsubscribe. */
  onResourceUpdated(listener: (uri: string) => void): () => void
  /** Called on `notifications/resources/list_changed` and `notifications/prompts/list_changed`. Returns an unsubscribe. */
  onCatalogChanged(listener: () => void): () => void
  /** The server declared the `logging` capability (it takes logging/setLevel). */
  readonly logging: boolean
  /** logging/setLevel (rejects `protocol` when the server did not declare logging). */
  setLoggingLevel(level: LoggingLevel, options: RequestOptions): Promise<void>
  /** Called on each `notifications/message` of the server. Returns an unsubscribe. */
  onLogMessage(listener: (message: LoggingMessageNotification["params"]) => void): () => void
  /**
   * Ends the connection: Streamable HTTP sends the session DELETE first; stdio ends the child's
   * whole process group (SIGTERM, then SIGKILL after a grace period). Idempotent; never rejects.
   */
  close(): Promise<void>
  /** Called once when the transport closes by itself (process exit, stream end). Returns an unsubscribe. */
  onClose(listener: (reason: string) => void): () => void
  /** Called on `notifications/tools/list_changed`. Returns an unsubscribe. */
  onToolsChanged(listener: () => void): () => void
  /** The last lines (up to 200) the local process wrote to stderr; empty for remote services. */
  stderrTail(): ReadonlyArray<string>
  /** The local process id, if any. */
  readonly pid: number | undefined
}

/** Options for opening a connection. */
/**
 * Where the store notes the process groups it starts and ends, so that a store killed before it could
 * end them has them ended by the next one (src/config/process-ledger.ts).
 */
export interface ProcessLedger {
  /** A group the store started (its leader's pid is the group's id), with the command, for the log. */
  started(pgid: number, command: string): void
  /** A group that has ended (or that the store has ended). */
  ended(pgid: number): void
}

/** A ledger that keeps nothing (a system without /proc, a connection opened outside a store). */
export const noProcessLedger: ProcessLedger = { started: () => undefined, ended: () => undefined }

export interface ConnectOptions extends RequestOptions {
  /** Client name sent in the initialize handshake. */
  readonly clientName?: string
  /** The service the connection is for, as the store's log lines name it (`<scope>/<name>`): its warnings say it. */
  readonly service?: string | undefined
  /** The service's OAuth token source (remote services; src/mcp/oauth-client.ts). */
  readonly auth?: UpstreamAuth | undefined
  /** The largest message read from the server (default `DEFAULT_MAX_MESSAGE_BYTES`). */
  readonly maxMessageBytes?: number
  /** Where a remote service may point (src/mcp/upstream-policy.ts); metadata addresses refused by default. */
  readonly upstream?: UpstreamPolicy
  /** The era an earlier connection to the service found (`McpConnection.era`): no probe this time. */
  readonly prior?: EraVerdict | undefined
  /** Told of a local service's process group (`noProcessLedger` when not given). */
  readonly processes?: ProcessLedger | undefined
}
