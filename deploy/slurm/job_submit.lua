-- coshare's job_submit plugin: an annotated job never starts before coshare has placed it.
--
-- A job is annotated when its comment mentions "coshare" (any case), for example
--   #SBATCH --comment="coshare: device-memory=2G device-threads=120"
-- Such a job is submitted held (priority 0); the coshare cycle on the controller writes its
-- placement (ReqNodeList and an AdminComment starting "coshare-placement", which only
-- operators can set) and releases it, or leaves it held with the reason in AdminComment.
-- Jobs whose comment does not mention coshare are never touched.
--
-- Install: JobSubmitPlugins=lua in slurm.conf and this file next to slurm.conf. The cycle
-- must run as one of the operators below (root by default).

local OPERATORS = { [0] = true }

local function annotated(comment)
   return comment ~= nil and string.find(string.lower(comment), "coshare", 1, true) ~= nil
end

local function placed(admin_comment)
   return admin_comment ~= nil and string.find(admin_comment, "coshare-placement", 1, true) == 1
end

function slurm_job_submit(job_desc, part_list, submit_uid)
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
