/**
 * The errors of the store's operations. They are the library's errors (what `createStore` users
 * catch) and are mapped to HTTP statuses and the contract's error body in one place,
 * src/http/contract-errors.ts.
 */
import { Data } from "effect"
import { MAX_FIELD_PROBLEMS, problemsMessage } from "./schemas.js"
import { didYouMean, suggestions } from "./suggest.js"
import type { Status } from "./service-definition.js"

/** One refused field: where it is and why. */
export interface FieldProblem {
  readonly field: string
  readonly problem: string
}

/** The input is malformed; nothing was changed. */
export class ValidationError extends Data.TaggedError("ValidationError")<{
  readonly message: string
  readonly problems: ReadonlyArray<FieldProblem>
}> {
  static of(problems: ReadonlyArray<FieldProblem>): ValidationError {
    return new ValidationError({ message: problemsMessage(problems), problems: problems.slice(0, MAX_FIELD_PROBLEMS) })
  }
}

export class ServiceNotFound extends Data.TaggedError("ServiceNotFound")<{
  readonly message: string
  readonly name: string
  readonly scope: string
  /** The scope's names closest to `name` ("did you mean"); only names the asker may see. */
  readonly suggestions: ReadonlyArray<string>
}> {
  /** `name` not found in `scope`, with suggestions from `candidates` (the scope's own service names). */
  static of(name: string, scope: string, candidates: Iterable<string> = []): ServiceNotFound {
    const close = suggestions(name, candidates)
    return new ServiceNotFound({
      message: `Service '${name}' not found in ${scope === "store" ? "the store" : `agent '${scope}'`}${didYouMean(close)}`,
      name,
      scope,
      suggestions: close
    })
  }
}

export class ToolNotFound extends Data.TaggedError("ToolNotFound")<{
  readonly message: string
  readonly toolName: string
  readonly scope: string
  /** The scope's callable names closest to `toolName` ("did you mean"); only names the asker may see. */
  readonly suggestions: ReadonlyArray<string>
}> {}

/**
 * A tool outside an allow-list (README, Security): its service's include_tools / exclude_tools, or
 * the caller's key's `tools` list. Recorded with the outcome `tool_not_allowed`.
 */
export class ToolNotAllowed extends Data.TaggedError("ToolNotAllowed")<{
  readonly message: string
  /** The callable name `<service>__<tool>`. */
  readonly toolName: string
  readonly serviceName: string
  readonly original: string
  readonly scope: string
}> {}

/**
 * A call to a tool held by its pins (docs/tool-pins.md): its definition changed since it was
 * pinned (or it is new), and an operator has not accepted it yet. `changedFields` and `diff` say what changed.
 */
export class ToolChanged extends Data.TaggedError("ToolChanged")<{
  readonly message: string
  /** The callable name `<service>__<tool>`. */
  readonly toolName: string
  readonly serviceName: string
  readonly original: string
  readonly scope: string
  readonly change: "changed" | "new"
  readonly changedFields: ReadonlyArray<string>
  readonly diff: Readonly<Record<string, { readonly before: string | null; readonly after: string | null } | undefined>>
}> {}

/** A resource (or resource template) URI that no connected service of the scope offers. */
export class ResourceNotFound extends Data.TaggedError("ResourceNotFound")<{
  readonly message: string
  readonly uri: string
  readonly scope: string
}> {}

/** A prompt name (`<service>__<prompt>`) that no connected service of the scope offers. */
export class PromptNotFound extends Data.TaggedError("PromptNotFound")<{
  readonly message: string
  readonly promptName: string
  readonly scope: string
  readonly suggestions: ReadonlyArray<string>
}> {}

/** An original tool name that several services of the scope expose. */
export class AmbiguousTool extends Data.TaggedError("AmbiguousTool")<{
  readonly message: string
  readonly toolName: string
  readonly candidates: ReadonlyArray<string>
}> {}

/** The upstream server refused the arguments (JSON-RPC -32602). */
export class InvalidArguments extends Data.TaggedError("InvalidArguments")<{
  readonly message: string
  readonly toolName: string
  readonly upstream: unknown
  /** Each argument that does not match the tool's input schema. */
  readonly problems: ReadonlyArray<FieldProblem>
}> {}

/**
 * The upstream answered with a JSON-RPC error, the connection broke during the call, or the
 * upstream sent a message over the store's size limit (`message_too_large`; the connection is
 * closed and the service reconnects).
 */
export class UpstreamError extends Data.TaggedError("UpstreamError")<{
  readonly message: string
  readonly outcome: "protocol_error" | "transport_error" | "message_too_large"
  readonly serviceName: string
  readonly code: number | undefined
}> {}

/** The tool's service was not connected when the call arrived. */
export class ServiceUnavailable extends Data.TaggedError("ServiceUnavailable")<{
  readonly message: string
  readonly serviceName: string
  readonly status: Status
  readonly nextRetryAt: string | null
  readonly lastError: string | null
}> {}

export class ToolTimeout extends Data.TaggedError("ToolTimeout")<{
  readonly message: string
  readonly toolName: string
  readonly timeoutSeconds: number
}> {}

/** A cap of the store was reached (services, per-request services, waiters); try again later. */
export class TooMany extends Data.TaggedError("TooMany")<{
  readonly message: string
  /** Which cap, by its option name (`max_services`, `max_waiters`, ...). */
  readonly limit: string
  readonly max: number
  /** Seconds a client should wait before trying again; null when trying again cannot help (a setting of the store stands in the way). */
  readonly retryAfterSeconds: number | null
}> {}

/**
 * A call that needed an approval (its service's `require_approval`, README "Approvals") and did not
 * get one: denied by `by`, not decided within the approval time-out, or not asked at all because
 * too many approvals are pending. Recorded with the outcome `denied` or `approval_timeout`.
 */
export class ApprovalRefused extends Data.TaggedError("ApprovalRefused")<{
  readonly message: string
  readonly reason: "denied" | "timeout"
  readonly approvalId: string | null
  /** The callable name `<service>__<tool>`. */
  readonly toolName: string
  readonly serviceName: string
  /** Who denied it (a key's label); null for a time-out or a cap. */
  readonly by: string | null
}> {}

/**
 * A call of a principal on a `per_user` service whose credential it has not given (README,
 * Per-user credentials): `headers` and `env` name what it must give, `oauth` whether it must
 * authorize the upstream for itself, `route` where (PUT its values, or POST .../authorize).
 */
export class CredentialsRequired extends Data.TaggedError("CredentialsRequired")<{
  readonly message: string
  readonly serviceName: string
  readonly scope: string
  readonly headers: ReadonlyArray<string>
  readonly env: ReadonlyArray<string>
  /** Whether each caller authorizes the upstream's OAuth itself (`per_user.oauth`). */
  readonly oauth: boolean
  /** What this caller lacks: its values (PUT), its own authorization (POST .../authorize), or both. */
  readonly missing: ReadonlyArray<CredentialPart>
  /** Where it gives the first thing missing. */
  readonly route: string
}> {}

/** The parts of a principal's own credential for a `per_user` service: header or environment values, and its own OAuth authorization. */
export type CredentialPart = "values" | "authorization"

/** The caller may not do this (a local service from a non-loopback client, ...); nothing changed. */
export class Forbidden extends Data.TaggedError("Forbidden")<{
  readonly message: string
}> {}

/**
 * Replica mode: the cluster's Redis cannot be reached, so a change cannot be made for every replica
 * (docs/replicas.md); nothing was changed. Reads and calls go on from what the replica knows.
 */
export class ClusterUnavailable extends Data.TaggedError("ClusterUnavailable")<{
  readonly message: string
}> {
  static of(what: string, cause: unknown): ClusterUnavailable {
    const why = cause instanceof Error ? cause.message : String(cause)
    return new ClusterUnavailable({
      message: `The cluster's Redis cannot be reached (${why}): ${what} is refused and nothing was changed; try again when it is back`
    })
  }
}

/** Any error a store operation fails with on purpose. */
export type StoreError =
  | ValidationError
  | ServiceNotFound
  | ToolNotFound
  | ToolNotAllowed
  | ToolChanged
  | ResourceNotFound
  | PromptNotFound
  | AmbiguousTool
  | InvalidArguments
  | UpstreamError
  | ServiceUnavailable
  | ToolTimeout
  | TooMany
  | Forbidden
  | ClusterUnavailable
  | ApprovalRefused
  | CredentialsRequired

const TAGS = new Set([
  "ValidationError",
  "ServiceNotFound",
  "ToolNotFound",
  "ToolNotAllowed",
  "ToolChanged",
  "ResourceNotFound",
  "PromptNotFound",
  "AmbiguousTool",
  "InvalidArguments",
  "UpstreamError",
  "ServiceUnavailable",
  "ToolTimeout",
  "TooMany",
  "Forbidden",
  "ClusterUnavailable",
  "ApprovalRefused",
  "CredentialsRequired"
])

/** True for the errors above (anything else is a bug or an abort). */
export const isStoreError = (e: unknown): e is StoreError =>
  typeof e === "object" && e !== null && TAGS.has((e as { _tag?: string })._tag ?? "")
