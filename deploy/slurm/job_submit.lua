-- coshare's job_submit plugin: an annotated job never starts before coshare has placed it.
--
-- A job is annotated when its comment mentions "coshare" (any case), for example
--   #SBATCH --comment="coshare: device-memory=2G device-threads=120"
-- Such a job is submitted held (priority 0); the coshare cycle on the controller writes its
-- placement (ReqNodeList and an AdminComment starting "coshare-placement", which only
-- operators can set) and releases it, or leaves it held with the reason in AdminComment.
-- Jobs whose comment does not mention coshare are never touched.
--
-- Once placed, its owner can no longer change the comment, hold it, or change what the
-- placement was planned for (nodes, partition, cores, memory, GRES); coshare's Prolog also
-- refuses a placed job that starts on another node than its placement.
--
-- Install: JobSubmitPlugins=lua in slurm.conf and this file next to slurm.conf. The cycle
-- must run as one of the operators below (root by default).

local OPERATORS = { [0] = true }

-- The lending partition (slurm.lend_partition in coshare's configuration; the collocate
-- policy): the same nodes as the partition coshare plans, OverSubscribe=FORCE, so
-- that a CPU-only job coshare placed on a GPU job's idle cores can start beside it (Slurm
-- shares cores only between jobs of one partition). Only coshare puts jobs there: a GPU job
-- that may lend cores, and the jobs placed on them; the node side takes the borrower's cores
-- out of the GPU job's cpuset before it runs. Nobody else may submit a job into it or move
-- one there, or jobs would share cores unpartitioned. Keep in sync with slurm.conf.
local LEND_PARTITION = "coshare-lend"

local function names_lend(partition)
   if partition == nil then return false end
   for name in string.gmatch(partition, "[^,]+") do
      if name == LEND_PARTITION then return true end
   end
   return false
end

local function annotated(comment)
   return comment ~= nil and string.find(string.lower(comment), "coshare", 1, true) ~= nil
end

local function placed(admin_comment)
   return admin_comment ~= nil and string.find(admin_comment, "coshare-placement", 1, true) == 1
end

-- What a placement was planned for: the node and its devices, the cores, memory and
-- device share the job asked for. On a pending job Slurm lets its owner change all of these
-- with scontrol update (seen on Slurm 22.05: ReqNodeList, NodeList, ExcNodeList, NumNodes,
-- Partition, NumCPUs, NumTasks, CPUsPerTask, MinCPUsNode, MinMemoryNode, Gres, TresPerNode
-- all accepted), which would start the job elsewhere, or larger, than coshare planned. The
-- names are job_desc's fields in src/plugins/job_submit/lua/job_submit_lua.c.
local PLACEMENT_STRINGS = {
   "req_nodes", "exc_nodes", "partition", "features", "prefer", "batch_features", "clusters",
   "reservation", "licenses", "tres_per_node", "tres_per_job", "tres_per_socket",
   "tres_per_task", "cpus_per_tres", "mem_per_tres",
}
local PLACEMENT_NUMBERS = {
   "min_nodes", "max_nodes", "num_tasks", "min_cpus", "max_cpus", "cpus_per_task",
   "pn_min_cpus", "min_mem_per_node", "min_mem_per_cpu", "ntasks_per_node",
   "ntasks_per_socket", "ntasks_per_core", "ntasks_per_tres", "sockets_per_node",
   "cores_per_socket", "threads_per_core", "shared", "contiguous", "core_spec", "thread_spec",
}
-- What an update leaves unchanged reads as nil, or as one of Slurm's "no value" numbers.
local NO_VALUE = { [4294967294] = true, [65534] = true, [254] = true,
                   [18446744073709551614] = true }

local function placement_changes(job_desc)
   local changed = {}
   for _, name in ipairs(PLACEMENT_STRINGS) do
      if job_desc[name] ~= nil then table.insert(changed, name) end
   end
   for _, name in ipairs(PLACEMENT_NUMBERS) do
      local value = job_desc[name]
      if value ~= nil and not NO_VALUE[value] then table.insert(changed, name) end
   end
   return changed
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   if names_lend(job_desc.partition) and not OPERATORS[submit_uid] then
      slurm.log_user("coshare: partition %s is for jobs coshare places on lent cores; " ..
                     "submit to your usual partition", LEND_PARTITION)
      return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
   end
   if not annotated(job_desc.comment) then
      return slurm.SUCCESS
   end
   if job_desc.priority == 0 then
      -- coshare releases every placed job; a user's own hold would be lost silently.
      slurm.log_user("coshare: an annotated job is held until coshare places it and is " ..
                     "then released, so --hold is refused; delay it with --begin or --dependency")
      return slurm.ERROR
   end
   job_desc.priority = 0
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   if names_lend(job_desc.partition) and not OPERATORS[modify_uid] then
      slurm.log_info("coshare: refused uid %u's move of job %u into %s", modify_uid,
                     job_rec.job_id, LEND_PARTITION)
      return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
   end
   local comment = job_desc.comment or job_rec.comment
   if OPERATORS[modify_uid] or not (annotated(comment) or annotated(job_rec.comment)) then
      return slurm.SUCCESS
   end
   if placed(job_rec.admin_comment) then
      -- Placed: its device and node were chosen for what it declared.
      if job_desc.comment ~= nil and job_desc.comment ~= job_rec.comment then
         slurm.log_user("coshare: job %u is already placed for the annotations it had; " ..
                        "cancel and resubmit it to change them", job_rec.job_id)
         return slurm.ERROR
      end
      if job_desc.priority == 0 then
         slurm.log_user("coshare: job %u is placed; holding it would lose its place " ..
                        "(cancel it, or resubmit with --begin or --dependency)", job_rec.job_id)
         return slurm.ERROR
      end
      local changed = placement_changes(job_desc)
      if #changed > 0 then
         slurm.log_info("coshare: refused uid %u's change of %s of placed job %u",
                        modify_uid, table.concat(changed, ","), job_rec.job_id)
         slurm.log_user("coshare: job %u is placed for what it asked; its nodes and size " ..
                        "cannot change (%s): cancel and resubmit it",
                        job_rec.job_id, table.concat(changed, ", "))
         -- scontrol does not show log_user text for an update: the error code must speak.
         return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
      end
      return slurm.SUCCESS
   end
   if job_desc.priority ~= nil and job_desc.priority ~= 0 and job_desc.priority ~= slurm.NO_VAL then
      slurm.log_user("coshare: job %u stays held until coshare places it", job_rec.job_id)
      return slurm.ERROR
   end
   -- Any other update of an unplaced annotated job (adding coshare keys, nice, ...) leaves
   -- or makes it held.
   job_desc.priority = 0
   return slurm.SUCCESS
end
