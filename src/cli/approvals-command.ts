/**
 * `mcp-store approvals [list] | approve <id> | deny <id>`: the calls of a running store that wait
 * for an approval (README, "Approvals"), listed with their tool, arguments and caller, and decided
 * from a terminal, over the store's HTTP API with an admin key. A decision carries the digest of the
 * arguments the list showed, so it holds only for the call that was shown.
 */
import { Command } from "commander"
import { parseArguments, storeClient, withStoreOptions } from "./subcommand.js"

/** Where the command writes (tests give their own). */
export interface ApprovalsCommandIo {
  readonly writeOut?: (text: string) => void
  readonly writeErr?: (text: string) => void
}

interface Listed {
  readonly approval_id: string
  readonly tool_name: string
  readonly scope: string
  readonly caller: string
  readonly arguments: unknown
  readonly arguments_digest: string
  readonly expires_at: string
}

/** Runs the command; resolves with the exit code. */
export const runApprovals = async (argv: ReadonlyArray<string>, env: NodeJS.ProcessEnv, io: ApprovalsCommandIo = {}): Promise<number> => {
  const out = io.writeOut ?? ((text: string) => process.stdout.write(text))
  const err = io.writeErr ?? ((text: string) => process.stderr.write(text))
  // Set by the subcommand commander runs (a holder: TypeScript does not see assignments in callbacks).
  const chosen: { action: { readonly kind: "list" } | { readonly kind: "approve" | "deny"; readonly id: string } } = { action: { kind: "list" } }
  const program = withStoreOptions(new Command("mcp-store approvals"))
    .description("list and decide the calls of a running store that wait for an approval (an admin key)")
    .exitOverride()
    .configureOutput({ writeOut: out, writeErr: err, outputError: () => undefined })
  program.command("list", { isDefault: true }).description("the calls waiting, with their arguments").action(() => {
    chosen.action = { kind: "list" }
  })
  program.command("approve <approval_id>").description("let the call run").action((id: string) => {
    chosen.action = { kind: "approve", id }
  })
  program.command("deny <approval_id>").description("refuse the call").action((id: string) => {
    chosen.action = { kind: "deny", id }
  })
  for (const sub of program.commands) sub.exitOverride().configureOutput({ writeOut: out, writeErr: err, outputError: () => undefined })
  const parsed = await parseArguments(program, argv, err, "mcp-store approvals")
  if (parsed !== undefined) return parsed
  const action = chosen.action
  const { base, request } = storeClient(program.opts<{ url?: string; apiKey?: string }>(), env)
  try {
    if (action.kind === "list") {
      const listed = await request("GET", "/for_store/approvals")
      if (listed.status !== 200) {
        err(`mcp-store approvals: ${String(listed.body["message"] ?? `HTTP ${listed.status}`)}\n`)
        return 1
      }
      const approvals = (listed.body["approvals"] ?? []) as ReadonlyArray<Listed>
      if (approvals.length === 0) out("No call waits for an approval.\n")
      for (const a of approvals) {
        out(`${a.approval_id}  ${a.tool_name} (${a.scope === "store" ? "store" : `agent ${a.scope}`}) by ${a.caller}, until ${a.expires_at}\n  arguments ${JSON.stringify(a.arguments)}\n  sha256 ${a.arguments_digest}\n`)
      }
      return 0
    }
    // The decision is bound to the arguments the approver can see now: read them first, decide with their digest.
    const shown = await request("GET", `/for_store/approvals/${encodeURIComponent(action.id)}`)
    if (shown.status !== 200) {
      err(`mcp-store approvals: ${String(shown.body["message"] ?? `HTTP ${shown.status}`)}\n`)
      return 1
    }
    const approval = shown.body["approval"] as Listed
    const decided = await request("POST", `/for_store/approvals/${encodeURIComponent(action.id)}`, { decision: action.kind, arguments_digest: approval.arguments_digest })
    if (decided.status !== 200) {
      err(`mcp-store approvals: ${String(decided.body["message"] ?? `HTTP ${decided.status}`)}\n`)
      return 1
    }
    out(`${String(decided.body["message"])}\n  arguments ${JSON.stringify(approval.arguments)}\n`)
    return 0
  } catch (e) {
    err(`mcp-store approvals: the store at ${base} cannot be reached: ${e instanceof Error ? e.message : String(e)}\n`)
    return 1
  }
}
