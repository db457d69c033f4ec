/**
 * A failed upstream request as the domain's failure, in one place: the transport edge classifies
 * every failure as an `McpRequestError` (src/mcp/request.ts), and this maps it, once, to the
 * store's tagged errors (src/domain/errors.ts) for tool calls, task requests and catalog requests
 * (resources, prompts, completion) alike; each face then renders that error once (HTTP body,
 * JSON-RPC error, record outcome: `outcomeOf`). A time-out is `ToolTimeout` whatever was asked (504 TOOL_TIMEOUT,
 * record outcome `timeout`); the caller's own abort is no failure (the call ends interrupted).
 */
import { statusOf, type ServiceSnapshot } from "../machines/service.js"
import { McpRequestError } from "../mcp/types.js"
import { AUTHORIZE_HINT } from "../mcp/oauth-client.js"
import type { Outcome } from "../records/tool-records.js"
import { ClusterUnavailable, CredentialsRequired, InvalidArguments, isStoreError, ResourceNotFound, ServiceUnavailable, TooMany, ToolTimeout, UpstreamError, ValidationError } from "../domain/errors.js"
import { NotConnected } from "./service-request.js"
import { iso } from "./service-views.js"

/** What a failed request asked of which service. */
interface Subject {
  readonly serviceName: string
  /** The time-out the request had, in seconds (what a `ToolTimeout` reports). */
  readonly timeoutSeconds: number
}

/** A tool call: `toolName` as the caller named it; -32602 is `InvalidArguments`. */
export interface CallSubject extends Subject {
  readonly kind: "call"
  readonly toolName: string
}

/**
 * A catalog request: `name` is the URI or prompt name asked for; -32602 is a `ValidationError` on
 * `field`. A read (`uri` set: the URI as the caller gave it, `sentUri` as the upstream was asked,
 * the original of a prefixed one) whose resource the upstream does not have is `ResourceNotFound`,
 * told as either era tells it (`isResourceNotFound`).
 */
export interface CatalogSubject extends Subject {
  readonly kind: "catalog"
  readonly name: string
  readonly field: string
  readonly scope: string
  readonly uri?: string | undefined
  readonly sentUri?: string | undefined
}

/**
 * An upstream's "resource not found", in either era: -32002 (the 2025 revisions' code), or -32602
 * whose `data.uri` is the URI it was asked (2026-07-28: "Invalid Params" with the URI, as the
 * SDK v2's `ResourceNotFoundError` sends it). Any other -32602 is a refusal of the params.
 */
const isResourceNotFound = (e: McpRequestError, sentUri: string): boolean => {
  if (e.code === -32002) return true
  if (e.code !== -32602) return false
  const data = e.data
  return typeof data === "object" && data !== null && (data as { uri?: unknown }).uri === sentUri
}

/** The refusal of a request to a service that is not connected: its status and next retry. */
export const serviceUnavailable = (snapshot: ServiceSnapshot): ServiceUnavailable => {
  const status = statusOf(snapshot)
  // A service waiting for its OAuth authorization is not mended by time: the message says who acts.
  const waiting = snapshot.context.auth?.state === "needs_authorization" || snapshot.context.auth?.state === "authorizing"
  return new ServiceUnavailable({
    message: waiting
      ? `Service '${snapshot.context.name}' is ${status}: it waits for its OAuth authorization (${AUTHORIZE_HINT})`
      : `Service '${snapshot.context.name}' is ${status}; try again later`,
    serviceName: snapshot.context.name,
    status,
    nextRetryAt: iso(snapshot.context.nextRetryAt),
    lastError: snapshot.context.lastError ?? null
  })
}

/** A resource URI not found in a scope (`why` is appended to the message). */
export const resourceNotFound = (scope: string, uri: string, why = ""): ResourceNotFound =>
  new ResourceNotFound({
    message: `Resource '${uri.length > 200 ? `${uri.slice(0, 200)}...` : uri}' not found in ${scope === "store" ? "the store" : `agent '${scope}'`}${why}`,
    uri: uri.slice(0, 1000),
    scope
  })

/** A request the cluster could not bring to the replica that runs the service (`unavailable`): nothing ran, and trying again soon may. */
export const clusterCannotReach = (serviceName: string, e: McpRequestError): ClusterUnavailable =>
  new ClusterUnavailable({ message: `Service '${serviceName}' cannot be reached now: ${e.message}` })

/**
 * The domain's failure of a failed upstream request; undefined when the caller aborted it (the
 * operation ends interrupted). Pure: what a transport failure does to the service's health is the
 * sender's business.
 */
export function requestFailure(e: McpRequestError, subject: CallSubject): ToolTimeout | InvalidArguments | UpstreamError | ClusterUnavailable | undefined
export function requestFailure(e: McpRequestError, subject: CatalogSubject): ToolTimeout | ValidationError | ResourceNotFound | UpstreamError | ClusterUnavailable | undefined
export function requestFailure(
  e: McpRequestError,
  subject: CallSubject | CatalogSubject
): ToolTimeout | InvalidArguments | ValidationError | ResourceNotFound | UpstreamError | ClusterUnavailable | undefined {
  const { serviceName } = subject
  const name = subject.kind === "call" ? subject.toolName : subject.name
  switch (e.kind) {
    case "aborted":
      return undefined
    case "timeout":
      return new ToolTimeout({ message: `${subject.kind === "call" ? "Tool" : "The request for"} '${name.slice(0, 200)}' did not answer within ${subject.timeoutSeconds} s`, toolName: name.slice(0, 1000), timeoutSeconds: subject.timeoutSeconds })
    case "protocol":
      if (subject.kind === "catalog" && subject.uri !== undefined && isResourceNotFound(e, subject.sentUri ?? subject.uri)) {
        return resourceNotFound(subject.scope, subject.uri, `: ${e.message}`)
      }
      if (e.code === -32602) {
        return subject.kind === "call"
          ? new InvalidArguments({ message: `Invalid arguments for '${name}': ${e.message}`, toolName: name, upstream: e.data ?? null, problems: [] })
          : ValidationError.of([{ field: subject.field, problem: `refused by '${serviceName}': ${e.message}` }])
      }
      return new UpstreamError({ message: `Service '${serviceName}' answered with an error: ${e.message}`, outcome: "protocol_error", serviceName, code: e.code })
    case "unavailable":
      return clusterCannotReach(serviceName, e)
    case "message_too_large":
      // The connection has closed itself: the service reconnects on its own.
      return new UpstreamError({ message: `Service '${serviceName}' sent an answer too large: ${e.message}`, outcome: "message_too_large", serviceName, code: undefined })
    default:
      return new UpstreamError({ message: `Connection to '${serviceName}' broke during the ${subject.kind === "call" ? "call" : "request"}: ${e.message}`, outcome: "transport_error", serviceName, code: undefined })
  }
}

/** How a relayed task request fails: a `per_user` service's may also be refused for want of the caller's credential, or past its pool's bound. */
export type TaskRequestError = UpstreamError | ServiceUnavailable | CredentialsRequired | TooMany | ClusterUnavailable

/**
 * The store's error of a failed task request (`tasks/get`, `tasks/result`, ... relayed to the
 * task's server): the upstream's own JSON-RPC error kept in `UpstreamError.code`, a request the
 * cluster could not bring to the replica that runs the service unavailable for now, as a call's.
 */
export const taskRequestFailure = (e: unknown, serviceName: string): TaskRequestError => {
  if (e instanceof CredentialsRequired || e instanceof TooMany || e instanceof ServiceUnavailable) return e
  if (e instanceof NotConnected) return serviceUnavailable(e.snapshot)
  if (e instanceof McpRequestError && e.kind === "unavailable") return clusterCannotReach(serviceName, e)
  if (e instanceof McpRequestError) return new UpstreamError({ message: e.message, outcome: e.kind === "protocol" ? "protocol_error" : "transport_error", serviceName, code: e.code })
  return new UpstreamError({ message: String((e as { message?: unknown }).message ?? e), outcome: "transport_error", serviceName, code: undefined })
}

/** The record outcome of a failed call (anything but the store's errors: the caller went away, or a bug). */
export const outcomeOf = (e: unknown): Outcome => {
  if (!isStoreError(e)) return "transport_error"
  switch (e._tag) {
    case "ToolTimeout":
      return "timeout"
    case "ServiceUnavailable":
    case "ClusterUnavailable":
    case "TooMany":
      return "unavailable"
    case "UpstreamError":
      return e.outcome
    case "ToolNotAllowed":
      return "tool_not_allowed"
    case "ToolChanged":
      return "tool_changed"
    case "CredentialsRequired":
      return "credentials_required"
    case "ApprovalRefused":
      return e.reason === "denied" ? "denied" : "approval_timeout"
    case "InvalidArguments":
      // Refused by the tool's schema here, or by the upstream (-32602): the caller's mistake.
      return "invalid_arguments"
    default:
      return "protocol_error"
  }
}
