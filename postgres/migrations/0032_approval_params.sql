-- 0032_approval_params: an approval keeps what the approver sees
-- of its request's parameters (keybrake.ApprovalParams, as JSON), as
-- SQLite's 0028 does. Approvals recorded before this migration keep NULL
-- and show "parameters not recorded".
ALTER TABLE approvals ADD COLUMN params TEXT;
